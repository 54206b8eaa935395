"""The client's schema step (pipeline/source/evolution.py): a field the platform begins to send becomes a typed column
of its table by the naming rule (nested objects flattened, arrays as JSON, types from the values), a value of another
type for an existing column quarantines its record as served with the field named, `freeze` stops the stream naming
the field, `discard_value` keeps today's `extra`; a page without unknown fields passes untouched (the fast path)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pyarrow as pa
import pytest
from source_edge_server import SECRET, EdgeState, edge_server, raw

from pipeline.contract.evolution import DiscoveredColumn, SchemaPolicy, evolved_spec
from pipeline.contract.streams import STREAMS
from pipeline.contract.tables import TABLES
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.decoding import PageDecoder, PageLocation, arrow_page
from pipeline.source.errors import SchemaContractError
from pipeline.source.evolution import SchemaEvolution
from pipeline.source.fast_decoding import FastPages
from pipeline.source.fetching import SourceCore, keep_body
from pipeline.source.paging import Request
from pipeline.source.stats import RunStats

ACTIVE = {
    "stats": {"progressInPercent": 66, "nbIncorrectAnswers": 0, "success": False, "validationThreshold": 70.5},
    "version": 2,
    "_ownerId": "o",
    "_lessonId": "L",
    "timeSpent": 660,
    "achieved": False,
    "lastDate": "2026-05-05T07:43:45.815Z",
    "startDate": "2026-05-05T07:19:50.596Z",
    "title": "t",
}
ANSWER = {
    "attemptIndex": 1,
    "quizType": "exit",
    "_activeLessonId": "a",
    "_lessonId": "L",
    "_userId": "u",
    "lessonVersion": 2,
    "lastDate": "2026-05-05T07:43:45.815Z",
    "results": [{"type": "number", "value": 26.5}, {"type": "choice-ref", "value": "c3", "labelName": "C"}],
}
WHERE = PageLocation("active_lessons", "/v1/active-lessons", 1, {"pageSize": "10"})


def active(number: int, **fields: Any) -> dict[str, Any]:
    return {**ACTIVE, "_userId": f"u{number}", **fields}


def decoded(records: list[dict[str, Any]], stream: str = "active_lessons", fast: bool = True):
    """A page as the client decodes it (the fast path when it takes it), holding its body as fetching.py does."""
    spec = STREAMS[stream]
    body = orjson.dumps(records)
    where = PageLocation(spec.name, WHERE.endpoint, 1, WHERE.params)
    request = Request(spec, {})
    page = FastPages.for_stream(spec).page(request, body, where, True) if fast else None  # type: ignore[union-attr]
    if page is None:
        page = arrow_page(request, PageDecoder(spec).decode(body, where), SourceCore.key_getter(spec))
    return keep_body(page, body)


def rows(page, table: str) -> list[dict[str, Any]]:
    return [r for b in page.batches if b.table.name == table for r in b.records.to_pylist()]


def evolve(records, contract="evolve", discovered=(), stream="active_lessons", fast=True):
    stats = RunStats(stream)
    step = SchemaEvolution(SchemaPolicy({t: contract for t in TABLES}, tuple(discovered)))
    return step.apply(decoded(records, stream, fast), stats), stats, step


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "validated-path"])
def test_new_fields_become_columns_named_and_typed_by_the_rule(fast: bool) -> None:
    records = [
        active(0, quizTimeSeconds=12, quizInfo={"attempts": 2, "label": "x"}, tags=["a", "b"], ratio=1),
        active(
            1,
            quizTimeSeconds=None,
            ratio=2.5,
            startedOn="2026-05-05T07:43:45Z",
            stats={**ACTIVE["stats"], "newRank": True},
        ),
        active(2, onlyNull=None),
        active(3),
    ]
    page, stats, _ = evolve(records, fast=fast)
    found = {c.column: (c.api_path, c.type) for c in stats.new_columns}
    assert found == {
        "quiz_time_seconds": ("quizTimeSeconds", "BIGINT"),
        "quiz_info_attempts": ("quizInfo.attempts", "BIGINT"),
        "quiz_info_label": ("quizInfo.label", "VARCHAR"),
        "tags": ("tags", "JSON"),
        "ratio": ("ratio", "DOUBLE"),  # an integer and a float: DOUBLE
        "started_on": ("startedOn", "VARCHAR"),  # ISO 8601 text stays text
        "stats_new_rank": ("stats.newRank", "BOOLEAN"),
    }
    batch = next(b for b in page.batches if b.table.name == "active_lessons")
    assert batch.table.schema.field("quiz_time_seconds").type == pa.int64()
    assert batch.table.schema.field("tags").metadata[b"json"] == b"1"
    assert batch.table.schema.names[: len(TABLES["active_lessons"].schema)] == TABLES["active_lessons"].schema.names
    got = rows(page, "active_lessons")
    assert [r["quiz_time_seconds"] for r in got] == [12, None, None, None]
    assert [r["ratio"] for r in got] == [1.0, 2.5, None, None]
    assert got[0]["quiz_info_attempts"] == 2 and got[0]["quiz_info_label"] == "x"
    assert json.loads(got[0]["tags"]) == ["a", "b"] and got[1]["stats_new_rank"] is True
    # only-null fields have no type yet: they stay in extra (keyed by dotted path); everything else left it
    assert [r["extra"] for r in got] == [None, None, '{"onlyNull":null}', None]
    assert stats.new_fields == {} and page.quarantined == 0


def test_a_value_of_another_type_quarantines_its_record_as_served_and_the_rest_loads() -> None:
    known = DiscoveredColumn("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT", 3)
    records = [active(0, quizTimeSeconds=5), active(1, quizTimeSeconds="12"), active(2, quizTimeSeconds=7.5), active(3)]
    page, stats, _ = evolve(records, discovered=[known])
    assert [r["user_id"] for r in rows(page, "active_lessons")] == ["u0", "u3"]
    quarantine = rows(page, "quarantine")
    assert [(q["record_index"], q["field"]) for q in quarantine] == [(1, "quizTimeSeconds"), (2, "quizTimeSeconds")]
    assert "a string where column lms.active_lessons.quiz_time_seconds is BIGINT (got '12')" in quarantine[0]["message"]
    assert json.loads(quarantine[0]["raw"]) == records[1]  # the record as served
    assert page.quarantined == 2 and page.records == 2 and stats.new_columns == []


def test_a_child_record_of_another_type_quarantines_its_parent_with_all_its_children() -> None:
    known = DiscoveredColumn("answer_results", "weight", "weight", "DOUBLE", 4)
    answers = [
        {**ANSWER, "_questionId": "q0", "results": [{"type": "text", "value": "a", "weight": 2}]},
        {**ANSWER, "_questionId": "q1", "results": [{"type": "text", "value": "b"}, {"type": "text", "weight": "x"}]},
    ]
    page, _, _ = evolve(answers, discovered=[known], stream="answers_by_lesson")
    assert [r["question_id"] for r in rows(page, "answers")] == ["q0"]
    assert [(r["question_id"], r["weight"]) for r in rows(page, "answer_results")] == [("q0", 2.0)]
    quarantine = rows(page, "quarantine")
    assert [(q["record_index"], q["field"]) for q in quarantine] == [(1, "answer_results.weight")]
    assert json.loads(quarantine[0]["raw"])["_questionId"] == "q1"


def test_freeze_stops_the_stream_naming_the_field() -> None:
    with pytest.raises(SchemaContractError) as failure:
        evolve([active(0), active(1, quizTimeSeconds=3)], contract="freeze")
    message = str(failure.value)
    assert "quizTimeSeconds" in message and "active_lessons" in message and "freeze" in message
    known = DiscoveredColumn("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT", 3)
    page, _, _ = evolve([active(0, quizTimeSeconds=3)], contract="freeze", discovered=[known])  # in the schema: loads
    assert rows(page, "active_lessons")[0]["quiz_time_seconds"] == 3


def test_discard_value_keeps_the_field_in_extra_as_before() -> None:
    records = [active(0, quizTimeSeconds=12), active(1)]
    page, stats, _ = evolve(records, contract="discard_value")
    assert [b.table for b in page.batches] == [TABLES["active_lessons"]]
    assert [r["extra"] for r in rows(page, "active_lessons")] == ['{"quizTimeSeconds":12}', None]
    assert stats.new_columns == []


def test_a_name_that_cannot_be_a_column_stays_in_extra() -> None:
    records = [active(0, Score=3, **{"9lives": 1, "first_loaded_at": "x"})]
    page, stats, _ = evolve(records)
    assert stats.new_columns == []  # `score` is declared, the others are not usable names
    assert json.loads(rows(page, "active_lessons")[0]["extra"]) == {"Score": 3, "9lives": 1, "first_loaded_at": "x"}


def test_a_page_without_unknown_fields_passes_untouched() -> None:
    """The usual page costs a null count: the same batches, not rebuilt; with a discovered column, null columns."""
    plain = decoded([active(0), active(1)])
    batches = list(plain.batches)
    page, _, _ = evolve([active(0), active(1)])
    assert all(a.records.equals(b.records) for a, b in zip(page.batches, batches, strict=True))
    step = SchemaEvolution(SchemaPolicy())
    again = decoded([active(0), active(1)])
    kept = list(again.batches)
    assert step.apply(again, RunStats("active_lessons")).batches == kept  # the very objects
    known = DiscoveredColumn("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT", 3)
    page, _, _ = evolve([active(0)], discovered=[known])
    assert page.batches[0].table == evolved_spec(TABLES["active_lessons"], [known])
    assert rows(page, "active_lessons")[0]["quiz_time_seconds"] is None


def test_the_client_types_a_new_field_over_http() -> None:
    """Through PlatformClient over HTTP: the first page has no new field, the second does; the batches of the
    second are wider, and a record with a string for it is quarantined."""
    first = [active(i) for i in range(3)]
    second = [active(3, quizTimeSeconds=40), active(4, quizTimeSeconds="soon"), active(5)]
    state = EdgeState(script=[raw(orjson.dumps(first)), raw(orjson.dumps(second)), raw(b"[]")])
    with edge_server(state) as url:
        settings = Settings(base_url=url, app_secret=SECRET, page_size=3, first_page="1", data_dir="unused")
        policy = SchemaPolicy({"active_lessons": "evolve"}, (), {"active_lessons": "active_lessons"})
        with PlatformClient(settings, schema=policy) as client:
            batches = list(client.iter_stream("active_lessons"))
            stats = client.last_run_stats()
    tables = [(b.table.name, len(b.table.schema)) for b in batches]
    declared = len(TABLES["active_lessons"].schema)
    assert tables == [("active_lessons", declared), ("active_lessons", declared + 1), ("quarantine", 9)]
    assert batches[1].records.column("quiz_time_seconds").to_pylist() == [40, None]
    assert [c.summary() for c in stats.new_columns] == [
        "new column `active_lessons.quiz_time_seconds` BIGINT (field quizTimeSeconds)"
    ]
    assert stats.quarantined == 1 and batches[2].records.column("field").to_pylist() == ["quizTimeSeconds"]


def test_an_object_where_a_value_is_and_a_value_where_an_object_is_are_conflicts_null_objects_are_not() -> None:
    time = DiscoveredColumn("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT", 3)
    info = DiscoveredColumn("active_lessons", "quiz_info_attempts", "quizInfo.attempts", "BIGINT", 3)
    records = [
        active(0, quizTimeSeconds={"s": 1}),
        active(1, quizInfo=5),
        active(2, quizInfo=None, quizTimeSeconds=None),  # an absent object: its columns null
        active(3, quizInfo={"attempts": 4}, quizTimeSeconds=9),
    ]
    page, _, _ = evolve(records, discovered=[time, info])
    got = rows(page, "active_lessons")
    assert [(r["user_id"], r["quiz_time_seconds"], r["quiz_info_attempts"], r["extra"]) for r in got] == [
        ("u2", None, None, None),
        ("u3", 9, 4, None),
    ]
    messages = [q["message"] for q in rows(page, "quarantine")]
    assert messages == [
        "quizTimeSeconds: an object where column lms.active_lessons.quiz_time_seconds is BIGINT",
        "quizInfo: an integer where the schema has an object (got 5)",
    ]
