"""The table catalog: every table declared, columns derived from the models, flattening exact."""

from datetime import UTC, datetime

import orjson
import pyarrow as pa
import pytest
from pydantic import ValidationError

from pipeline.contract.models import ActiveLesson, Answer, Lesson, LessonSession
from pipeline.contract.streams import STREAMS
from pipeline.contract.tables import BUILDS, TABLES
from pipeline.source.decoding import PageDecoder, RecordValidator, record_validator

EXPECTED_TABLES = {
    "active_lessons",
    "answers",
    "answer_results",
    "groups",
    "users",
    "group_members",
    "categories",
    "lesson_sessions",
    "lesson_session_registrations",
    "lessons",
    "lesson_questions",
    "quarantine",
    "certificate_events",
    "certificates",  # delivered by webhook, declared and loaded like the others
}


def test_every_table_is_declared_with_its_key():
    assert set(TABLES) == EXPECTED_TABLES
    assert TABLES["active_lessons"].key == ("owner_id", "user_id", "lesson_id")
    assert TABLES["answers"].key == ("active_lesson_id", "quiz_type", "attempt_index", "question_id")
    assert TABLES["answer_results"].key == (*TABLES["answers"].key, "result_index")
    assert TABLES["answer_results"].parent == "answers"
    assert TABLES["lesson_questions"].key == ("lesson_id", "notion_index", "quiz", "question_index")
    assert TABLES["quarantine"].kind == "append"
    assert (TABLES["certificate_events"].kind, TABLES["certificate_events"].key) == ("append", ("event_id",))
    assert TABLES["certificates"].order_by == ("updated_at", "state", "last_received_at")
    assert "completed" < "expired"  # why `state` in that order makes an expiry beat a completion of the same updatedAt
    for spec in TABLES.values():
        assert all(not spec.schema.field(k).nullable for k in spec.key), spec.name


def test_every_stream_yields_declared_tables():
    for stream in STREAMS.values():
        assert stream.table in TABLES
        assert all(child in TABLES for child, _ in stream.children)
    assert STREAMS["groups"].params["includeDisabled"] == "true"
    assert STREAMS["answers_by_lesson"].params == {"includeArchived": "true", "includeEntryQuiz": "true"}


def test_types_follow_the_spec():
    schema = TABLES["active_lessons"].schema
    assert schema.field("stats_progress_in_percent").type == pa.float64()
    assert schema.field("stats_success").type == pa.bool_()
    assert schema.field("last_date").type == pa.timestamp("us", tz="UTC")
    assert schema.field("extra").metadata == {b"json": b"1"}
    sessions = TABLES["lesson_sessions"].schema
    assert sessions.field("presenters").type == pa.list_(pa.string())
    assert sessions.field("codes").metadata == {b"json": b"1"}
    assert "registrations" not in sessions.names  # carried by lesson_session_registrations
    results = TABLES["answer_results"].schema
    assert results.field("value_number").type == pa.float64()
    assert results.field("value_text").type == pa.string()


def batch_of(table, body: bytes, model):
    validator = RecordValidator(model)
    records = validator.page_with_extras.validate_json(body)
    return BUILDS[table].batch(records, with_extras=True), records


def test_flattening_keeps_values_extras_and_offsets():
    batch, _ = batch_of(
        "active_lessons",
        b'[{"stats": {"progressInPercent": 40, "newStat": [1]}, "_ownerId": "o",'
        b' "_userId": "u", "_lessonId": "l", "lastDate": "2026-11-01T12:00:00+02:00", "brandNew": "x"},'
        b' {"stats": null, "_ownerId": "o", "_userId": "v", "_lessonId": "l"}]',
        ActiveLesson,
    )
    first, second = batch.to_pylist()
    assert first["stats_progress_in_percent"] == 40.0
    assert first["stats_success"] is None
    assert first["last_date"] == datetime(2026, 11, 1, 10, tzinfo=UTC)
    assert first["extra"] == '{"brandNew":"x","stats.newStat":[1]}'
    assert second["stats_progress_in_percent"] is None and second["extra"] is None


def test_answer_result_value_keeps_its_json_type_in_the_child_table():
    body = (
        b'[{"results": [{"value": 3}, {"value": "3"}, {"position": {"left": 1.5}}], "attemptIndex": 1,'
        b' "quizType": "exit", "_activeLessonId": "a", "_lessonId": "l", "_userId": "u", "_questionId": "q"}]'
    )
    parent, answers = batch_of("answers", body, Answer)
    rows = STREAMS["answers_by_lesson"].children[0][1](answers, {})
    results = BUILDS["answer_results"].batch(parent, rows, with_extras=False).to_pylist()
    assert [(r["value_number"], r["value_text"]) for r in results] == [(3.0, None), (None, "3"), (None, None)]
    assert [r["result_index"] for r in results] == [0, 1, 2]
    assert {(r["question_id"], r["attempt_index"]) for r in results} == {("q", 1.0)}
    assert results[2]["position_left"] == 1.5


def test_list_of_objects_becomes_json_text_and_defaults_apply():
    body = (
        b'[{"id": "s", "guid": null, "title": null, "description": null, "lessonId": null, "creatorId": null,'
        b' "status": null, "quotas": {"type": "max", "max": 3}, "startDate": null, "endDate": null,'
        b' "creationDate": null, "presenters": ["p"], "codes": [{"type": "qr", "value": "v"}],'
        b' "location": null, "onSite": true, "isLive": false, "registrations": []}]'
    )
    row = batch_of("lesson_sessions", body, LessonSession)[0].to_pylist()[0]
    assert row["codes"] == '[{"type":"qr","value":"v"}]'
    assert (row["quotas_type"], row["quotas_max"], row["quotas_min"]) == ("max", 3.0, None)
    assert row["presenters"] == ["p"]
    assert row["extra"] is None
    lesson = batch_of(
        "lessons", b'[{"status": "online", "visibility": "public", "summary": "s", "title": "t", "id": "L"}]', Lesson
    )[0].to_pylist()[0]
    assert lesson["play_mode"] == "standard"  # the spec's default when the field is absent


GOOD = {"results": [], "attemptIndex": 0, "quizType": "exit", "_activeLessonId": "a", "_lessonId": "l", "_userId": "u"}
CORPUS = [
    GOOD,
    {**GOOD, "attemptIndex": "0"},
    {**GOOD, "attemptIndex": True},
    {**GOOD, "quizType": "final"},
    {k: v for k, v in GOOD.items() if k != "_userId"},
    {**GOOD, "results": [{"value": [1]}]},
    {**GOOD, "results": [{"type": "choice"}]},
    {**GOOD, "results": None},
    {**GOOD, "lastDate": "yesterday"},
    {**GOOD, "lastDate": None, "more": 1},
    {**GOOD, "_userId": 7},
    {**GOOD, "validation": {"feedback": {"status": "ok"}}},
    {**GOOD, "isValid": "true"},
    {**GOOD, "results": [{"position": {"left": "1"}}]},
]


@pytest.mark.parametrize("body", CORPUS)
def test_derived_validators_accept_and_reject_what_the_models_do(body):
    body = orjson.dumps(body)
    validator = RecordValidator(Answer)
    try:
        Answer.model_validate_json(body)
        model_ok = True
    except ValidationError:
        model_ok = False
    try:
        validator.record.validate_json(body)
        dict_ok = True
    except ValidationError:
        dict_ok = False
    assert dict_ok == model_ok


def test_closed_objects_reject_unknown_fields():
    validator = RecordValidator(LessonSession)
    with pytest.raises(ValidationError, match="extra"):
        validator.record.validate_python(
            {
                "id": "s",
                "guid": None,
                "title": None,
                "description": None,
                "lessonId": None,
                "creatorId": None,
                "status": None,
                "quotas": {"type": "max", "surprise": 1},
                "startDate": None,
                "endDate": None,
                "creationDate": None,
                "presenters": [],
                "codes": None,
                "location": None,
                "onSite": True,
                "isLive": False,
                "registrations": [],
            }
        )


@pytest.mark.parametrize("table", sorted(BUILDS))  # tables built from pages (not quarantine, not webhooks)
def test_empty_batches_match_the_schema(table):
    build = BUILDS[table]
    if hasattr(build, "parent_key"):
        parent = BUILDS[TABLES[table].parent or "users"].batch([], with_extras=False)
        assert build.batch(parent, [], with_extras=False).schema == TABLES[table].schema
    else:
        assert build.batch([], with_extras=False).schema == TABLES[table].schema


def test_a_page_decodes_record_by_record_only_when_it_must():
    from pipeline.source.decoding import PageDecoder, PageLocation

    decoder = PageDecoder(STREAMS["answers_by_lesson"])
    where = PageLocation("answers_by_lesson", "/v1/lessons/L%2F1/answers", 3, {"pageSize": "4"})
    page = decoder.decode(
        orjson.dumps(
            [
                {**GOOD, "quizType": "final", "_questionId": "q0"},
                {**GOOD, "_questionId": "q1"},
                GOOD,  # no _questionId: cannot be keyed
                {**GOOD, "_questionId": "q3", "surprise": {"x": 1}},
            ]
        ),
        where,
    )
    assert page.served == 4 and page.with_extras
    assert [r["_questionId"] for r in page.records] == ["q1", "q3"]
    assert [(q.record_index, q.field) for q in page.quarantined] == [(0, "quizType"), (2, "_questionId")]
    assert all(q.endpoint == where.endpoint and q.page == 3 for q in page.quarantined)
    batch = BUILDS["answers"].batch(page.records, with_extras=page.with_extras)
    assert batch.column("extra").to_pylist() == [None, '{"surprise":{"x":1}}']
    clean = decoder.decode(orjson.dumps([{**GOOD, "_questionId": "q"}]), where)
    assert not clean.with_extras and clean.quarantined == []


def test_a_models_validators_are_built_once_per_process():
    """Every run's client makes a decoder per stream; building pydantic's schemas again each time cost ~80 ms of
    the event loop a run."""
    first, again = PageDecoder(STREAMS["groups"]), PageDecoder(STREAMS["groups"])
    assert first._validator is again._validator is record_validator(STREAMS["groups"].model)
