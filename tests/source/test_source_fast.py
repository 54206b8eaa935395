"""The fast decoding path (pipeline/source/fast_decoding.py) against the validated one (decoding.py): it never
accepts what the models reject, and what it accepts becomes exactly the same batches; over real HTTP, a bad
record in the middle of a page still quarantines exactly that record, with the same where and why."""

import json

import orjson
import pytest
from pydantic import SecretStr
from source_edge_server import SECRET, EdgeState, edge_server, raw

from pipeline.contract.streams import STREAMS
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.decoding import PageDecoder, PageLocation, arrow_page
from pipeline.source.fast_decoding import FastPages
from pipeline.source.fetching import SourceCore
from pipeline.source.paging import Request

ANSWER = {
    "attemptIndex": 1,
    "quizType": "exit",
    "_activeLessonId": "a",
    "_lessonId": "L",
    "_userId": "u",
    "lessonVersion": 2,
    "questionTitle": "Q · é",
    "isValid": True,
    "lastDate": "2026-05-05T07:43:45.815Z",
    "startTimeStamp": 1777966619983,
    "endTimeStamp": 1777966663983.5,
    "results": [
        {"type": "number", "value": 26.5},
        {"type": "choice-ref", "value": "c3", "labelName": "C"},
        {"type": "text", "value": 3, "position": {"left": 1, "top": 2.5}},
    ],
    "validation": {
        "feedback": {"status": "valid", "title": "ok"},
        "forcedValidationType": "coach",
        "isForcedValid": False,
    },
}
ACTIVE = {
    "stats": {"progressInPercent": 66, "nbIncorrectAnswers": 0, "success": False, "validationThreshold": 70.5},
    "version": 2,
    "_ownerId": "o",
    "_userId": "u",
    "_lessonId": "L",
    "timeSpent": 660,
    "achieved": False,
    "lastDate": "2026-05-05T07:43:45.815Z",
    "startDate": "2026-05-05T07:19:50.596Z",
    "title": "T",
}


def answer(number: int, **changes):
    record = {**ANSWER, "_questionId": f"q{number}", **changes}
    return {k: v for k, v in record.items() if v is not ...}


def active(number: int, **changes):
    record = {**ACTIVE, "_userId": f"u{number}", **changes}
    return {k: v for k, v in record.items() if v is not ...}


# One record per case, placed in the middle of an otherwise clean page.
ANSWER_CASES = [
    {},  # clean
    {"attemptIndex": "1"},
    {"attemptIndex": True},
    {"attemptIndex": None},
    {"attemptIndex": ...},
    {"quizType": "final"},
    {"quizType": None},
    {"_userId": 7},
    {"_questionId": None},
    {"_questionId": ...},
    {"isValid": "true"},
    {"isValid": 1},
    {"lessonVersion": "2"},
    {"questionTitle": 5},
    {"results": None},
    {"results": [{"type": "choice"}]},
    {"results": [{"value": [1]}]},
    {"results": [{"value": True}]},
    {"results": [{"position": {"left": "1"}}]},
    {"results": ["x"]},
    {"results": [{"value": 1, "surprise": 2}]},  # unknown field in a child record
    {"results": [{"position": {"left": 1, "z": 3}}]},  # unknown field deep inside
    {"validation": {"feedback": {"status": "ok"}}},
    {"validation": {"feedback": {"novel": 1}}},
    {"validation": {"forcedValidationType": "robot"}},
    {"brandNew": {"x": 1}},  # unknown top-level field: kept in `extra`
    {"lastDate": "2026-05-05T07:43:45Z"},
    {"lastDate": "2026-05-05T07:43:45.815+02:00"},
    {"lastDate": "2026-05-05T07:43:45"},
    {"lastDate": "2026-05-05 07:43:45.815Z"},
    {"lastDate": "2026-05-05"},
    {"lastDate": "2026-02-30T07:43:45.815Z"},
    {"lastDate": "2026-05-05T24:00:00.000Z"},
    {"lastDate": "yesterday"},
    {"lastDate": 1777966619},
    {"lastDate": None},
    {"lastDate": "0026-05-05T07:43:45.815Z"},
    {"lastDate": "2026-05-05T07:43:45.123456Z"},
    {"lastDate": "2026-05-05T07:43:45.1234567Z"},
    # the ends of the range: in UTC they load, past it once converted to UTC they are quarantined
    {"lastDate": "9999-12-31T23:59:59.999999Z"},
    {"lastDate": "9999-12-31T23:59:59-14:00"},
    {"lastDate": "9999-12-31T09:59:59-14:00"},
    {"lastDate": "9999-12-31T23:59:59+14:00"},
    {"lastDate": "9999-12-31T23:59:59"},
    {"lastDate": "0001-01-01T00:00:00Z"},
    {"lastDate": "0001-01-01T00:00:00+14:00"},
    {"lastDate": "0001-01-01T00:00:00-14:00"},
    {"lastDate": "0001-01-01T13:59:59.999+14:00"},
    {"lastDate": "0001-01-01 00:00:00+01:00"},
    {"lastDate": "9999-12-31T23:59:59.999999-00:01"},
]
ACTIVE_CASES = [
    {},
    {"score": "high"},
    {"score": True},
    {"score": 1e300},
    {"stats": {"success": "no"}},
    {"stats": {"progressInPercent": "50"}},
    {"stats": {"newStat": [1]}},
    {"stats": None},
    {"stats": "x"},
    {"_ownerId": None},
    {"_lessonId": ...},
    {"achieved": 0},
    {"title": None},
    {"startDate": "2026-13-01T00:00:00Z"},
    {"extraThing": None},
    {"lastDate": "9999-12-31T23:59:59-14:00"},
    {"startDate": "0001-01-01T00:00:00+14:00"},
    {"startDate": "0001-01-01T00:00:00-14:00", "lastDate": "9999-12-31T23:59:59+14:00"},
    # integers a double cannot hold exactly: the nearest double on both paths
    {"successRate": 2**53 + 1},
    {"timeSpent": -(2**62) - 1},
    {"stats": {"validationThreshold": 2**63 - 1}},
]

# the date-times of the cases above that overflow once converted to UTC
OVERFLOWING = {
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01 00:00:00+01:00",
    "9999-12-31T23:59:59.999999-00:01",
}


UNKNOWN_ONLY = [
    {"results": [{"value": 1, "surprise": 2}]},
    {"results": [{"position": {"left": 1, "z": 3}}]},
    {"validation": {"feedback": {"novel": 1}}},
    {"brandNew": {"x": 1}},
    {"stats": {"newStat": [1]}},
    {"extraThing": None},
]


def _unknown_fields_only(case: dict) -> bool:
    return case in UNKNOWN_ONLY


def _decode_both(stream_name: str, records: list, path_values: dict):
    stream = STREAMS[stream_name]
    fast = FastPages.for_stream(stream)
    assert fast is not None
    request = Request(stream, path_values)
    where = PageLocation(stream.name, "/v1/x", 2, {"pageSize": "10"})
    key = SourceCore.key_getter(stream) if stream.pager == "records" else None
    body = orjson.dumps(records)
    validated = arrow_page(request, PageDecoder(stream).decode(body, where), key)
    return fast.page(request, body, where, key is not None), validated


def _assert_same_pages(quick, validated):
    assert (quick.served, quick.records, quick.quarantined) == (validated.served, validated.records, 0)
    assert [b.table.name for b in quick.batches] == [b.table.name for b in validated.batches]
    for mine, theirs in zip(quick.batches, validated.batches, strict=True):
        assert mine.records.schema == theirs.records.schema
        assert mine.records.to_pylist() == theirs.records.to_pylist(), mine.table.name
        assert (mine.endpoint, mine.page) == (theirs.endpoint, theirs.page)
    if validated.key_hashes is None:
        assert quick.key_hashes is None
    else:
        assert quick.key_hashes.tolist() == validated.key_hashes.tolist()


def _assert_overflow_quarantined(case: dict, validated) -> None:
    """A date-time past the UTC range is quarantined alone, its field named; the rest of the page loads."""
    fields = {field for field, value in case.items() if isinstance(value, str) and value in OVERFLOWING}
    if not fields:
        return
    assert validated.quarantined == 1 and validated.records == 2
    [row] = validated.batches[-1].records.to_pylist()
    assert row["field"] in fields and row["record_index"] == 1 and "out of range" in row["message"], row


@pytest.mark.parametrize("case", range(len(ANSWER_CASES)))
def test_fast_answers_never_accept_what_the_models_reject_and_agree_on_the_rest(case):
    records = [answer(0), answer(1, **ANSWER_CASES[case]), answer(2)]
    quick, validated = _decode_both("answers_by_user_lesson", records, {"user_id": "u", "lesson_id": "L"})
    _assert_overflow_quarantined(ANSWER_CASES[case], validated)
    if validated.quarantined:
        assert quick is None  # anything to quarantine goes the validated way
    elif quick is not None:
        _assert_same_pages(quick, validated)
    if case == 0 or _unknown_fields_only(ANSWER_CASES[case]):
        assert quick is not None  # a clean page, or one with new fields, takes the fast path


@pytest.mark.parametrize("case", range(len(ACTIVE_CASES)))
def test_fast_active_lessons_never_accept_what_the_models_reject_and_agree_on_the_rest(case):
    records = [active(0), active(1, **ACTIVE_CASES[case]), active(2)]
    quick, validated = _decode_both("active_lessons", records, {})
    _assert_overflow_quarantined(ACTIVE_CASES[case], validated)
    if validated.quarantined:
        assert quick is None
    elif quick is not None:
        _assert_same_pages(quick, validated)
    if case == 0 or _unknown_fields_only(ACTIVE_CASES[case]):
        assert quick is not None


def test_fast_path_covers_the_big_streams_and_declines_json_columns():
    covered = {name for name, stream in STREAMS.items() if FastPages.for_stream(stream) is not None}
    assert {
        "active_lessons",
        "answers_by_lesson",
        "answers_by_user",
        "answers_by_user_lesson",
        "groups",
        "group_users",
        "categories",
    } <= covered
    assert "lessons" not in covered and "lesson_sessions" not in covered  # lists of objects kept as JSON


def test_group_members_from_the_fast_path():
    stream = STREAMS["group_users"]
    users = [
        {
            "locale": "fr",
            "points": 3,
            "login": f"l{i}",
            "email": "e",
            "firstname": "f",
            "lastname": "l",
            "alias": "a",
            "id": f"u/{i}",
        }
        for i in range(3)
    ]
    quick, validated = _decode_both(stream.name, users, {"group_id": "g?1"})
    assert quick is not None
    _assert_same_pages(quick, validated)
    assert quick.batches[1].records.to_pylist() == [{"group_id": "g?1", "user_id": f"u/{i}"} for i in range(3)]


# --- over real HTTP: a bad record in the middle of a page -------------------------------------------------


def _settings(url: str) -> Settings:
    return Settings(
        base_url=url,
        app_secret=SecretStr(SECRET),
        first_page="1",
        page_size=50,
        max_attempts=3,
        retry_max_wait=0.5,
        data_dir="unused",
    )


def _answers_over_http(records: list) -> dict[str, list[dict]]:
    import pyarrow as pa

    state = EdgeState(body=[])
    pages = {"1": orjson.dumps(records)}  # then the confirming empty page; by pageNumber, since the pager
    by_page = lambda request: raw(pages.get(request.query_params["pageNumber"], b"[]"))(request)  # noqa: E731
    state.script = [by_page, by_page]  # fetches page 2 ahead and either may reach the server first
    with edge_server(state) as url, PlatformClient(_settings(url)) as client:
        batches = list(client.iter_answers(pa.table({"user_id": ["u"], "lesson_id": ["L"]})))
    tables: dict[str, list[dict]] = {}
    for batch in batches:
        tables.setdefault(batch.table.name, []).extend(batch.records.to_pylist())
    return tables


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        ({"quizType": "final"}, "quizType", ["'final'", "'exit'"]),
        ({"attemptIndex": "2"}, "attemptIndex", ["valid number", "'2'"]),
        ({"results": [{"type": "number", "value": True}]}, "results.0.value", ["True"]),
        ({"_questionId": None}, "_questionId", ["cannot key"]),
    ],
)
def test_a_bad_record_mid_page_over_http_is_quarantined_alone(bad, field, words):
    records = [answer(i) for i in range(9)]
    records[4] = answer(4, **bad)
    tables = _answers_over_http(records)
    [row] = tables["quarantine"]
    assert (row["record_index"], row["field"], row["page"]) == (4, field, 1)
    assert row["endpoint"] == "/v1/users/u/lessons/L/answers" and row["stream"] == "answers_by_user_lesson"
    assert all(word in row["message"] for word in words), row["message"]
    kept = json.loads(row["raw"])
    if field == "_questionId":  # quarantined after validation (decoding.py): the validated record, dates as parsed
        assert kept.pop("lastDate") == "2026-05-05T07:43:45.815000+00:00"
        assert kept == {k: v for k, v in records[4].items() if k != "lastDate"}
    else:
        assert kept == records[4]
    assert [r["question_id"] for r in tables["answers"]] == [f"q{i}" for i in range(9) if i != 4]
    assert len(tables["answer_results"]) == 8 * len(ANSWER["results"])


def test_an_unknown_field_mid_page_over_http_is_kept_in_extra():
    records = [answer(i) for i in range(5)]
    records[2] = answer(2, brandNew="x", validation={"feedback": {"status": "pending", "hint": 1}})
    tables = _answers_over_http(records)
    assert "quarantine" not in tables
    extras = [r["extra"] for r in tables["answers"]]
    assert extras[:2] == [None, None] and extras[3:] == [None, None]
    assert json.loads(extras[2]) == {"brandNew": "x", "validation.feedback.hint": 1}
    assert tables["answers"][2]["validation_feedback_status"] == "pending"


def test_a_wrong_type_mid_page_of_active_lessons_over_http():
    records = [active(i) for i in range(7)]
    records[3] = active(3, stats={"progressInPercent": "50"})
    state = EdgeState(body=[])
    state.script = [raw(orjson.dumps(records))]  # a short page: the last one
    with edge_server(state) as url, PlatformClient(_settings(url)) as client:
        batches = list(client.iter_stream("active_lessons"))
        stats = client.last_run_stats()
    rows = {b.table.name: b.records.to_pylist() for b in batches}
    [row] = rows["quarantine"]
    assert (row["record_index"], row["field"], row["endpoint"]) == (3, "stats.progressInPercent", "/v1/active-lessons")
    assert json.loads(row["raw"]) == records[3]
    assert [r["user_id"] for r in rows["active_lessons"]] == [f"u{i}" for i in range(7) if i != 3]
    assert stats.quarantined == 1 and stats.records == 6


def test_new_fields_and_a_bad_record_in_one_page_go_the_validated_way():
    records = [answer(0, brandNew=1), answer(1, quizType="final"), answer(2)]
    quick, validated = _decode_both("answers_by_lesson", records, {"lesson_id": "L"})
    assert quick is None and validated.quarantined == 1 and validated.records == 2


def test_the_validated_path_decodes_with_the_collector_paused_over_http(monkeypatch):
    """Lessons have no fast path (JSON columns): their pages are validated and converted with the cyclic
    collector paused (decoding.gc_paused: a third of that path's time on the catalogue of scale large), and the
    collector is on again afterwards."""
    import gc

    seen: list[bool] = []
    validate = PageDecoder.decode

    def spy(self, body, where):
        seen.append(gc.isenabled())
        return validate(self, body, where)

    monkeypatch.setattr(PageDecoder, "decode", spy)
    lessons = [
        {
            "status": "online",
            "visibility": "public",
            "summary": "s",
            "title": f"t{i}",
            "id": f"L{i}",
            "notions": [{"contents": [], "description": "d", "title": "n"}],
        }
        for i in range(3)
    ]
    state = EdgeState(body=[])
    state.script = [raw(orjson.dumps(lessons))]  # a short page: the last one
    assert gc.isenabled()
    with edge_server(state) as url, PlatformClient(_settings(url)) as client:
        batches = list(client.iter_stream("lessons"))
    assert seen == [False]
    assert gc.isenabled()
    rows = {b.table.name: b.records.to_pylist() for b in batches}
    assert [r["id"] for r in rows["lessons"]] == ["L0", "L1", "L2"]
    assert json.loads(rows["lessons"][0]["notions"]) == lessons[0]["notions"]
