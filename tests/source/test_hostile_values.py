"""Values a record can carry that the parsers or Arrow refuse, in the middle of an active-lessons page: each
record either loads (the same on both decoding paths) or is quarantined alone with its field named, and the
rest of the page loads. A body cut short is still a truncated body (retried), never a quarantine."""

import json

import orjson
import pytest

from pipeline.contract.streams import STREAMS
from pipeline.source.decoding import PageDecoder, PageLocation, arrow_page, split_json_array
from pipeline.source.errors import TruncatedBody
from pipeline.source.fast_decoding import FastPages
from pipeline.source.fetching import SourceCore
from pipeline.source.paging import Request

ACTIVE = {
    "stats": {"progressInPercent": 66, "nbIncorrectAnswers": 0, "success": False, "validationThreshold": 70.5},
    "version": 2,
    "_ownerId": "o",
    "_lessonId": "L",
    "timeSpent": 660,
    "achieved": False,
    "lastDate": "2026-05-05T07:43:45.815Z",
    "startDate": "2026-05-05T07:19:50.596Z",
    "title": 'a "]}, [{" \\ title',  # brackets, quotes and escapes inside a string
}
STREAM = STREAMS["active_lessons"]


def record(number: int, tail: bytes = b"") -> bytes:
    """An active lesson as JSON; `tail` (raw JSON members) is appended to its object."""
    body = orjson.dumps({**ACTIVE, "_userId": f"u{number}"})
    return body[:-1] + b", " + tail + b"}" if tail else body


def page(tail: bytes) -> bytes:
    return b"[" + b",".join([record(0), record(1, tail), record(2)]) + b"]"


def decode(body: bytes):
    where = PageLocation(STREAM.name, "/v1/active-lessons", 4, {"pageSize": "3"})
    request = Request(STREAM, {})
    key = SourceCore.key_getter(STREAM)
    validated = arrow_page(request, PageDecoder(STREAM).decode(body, where), key)
    fast = FastPages.for_stream(STREAM)
    assert fast is not None
    return fast.page(request, body, where, True), validated


def deep(depth: int) -> bytes:
    return b'"deep": ' + b'{"n": ' * depth + b"1" + b"}" * depth


QUARANTINED = {
    "unpaired-surrogate": (b'"title": "x\\ud800y"', "title"),
    "unpaired-surrogate-nested": (b'"stats": {"label": "\\udfff"}', "stats.label"),
    "unknown-field-nested-300": (deep(300), "deep"),
    "unknown-field-nested-5000": (deep(5000), "(record)"),  # past Python's own parser as well
    "integer-past-double-range": (b'"successRate": 1' + b"0" * 400, "successRate"),
}
LOADED = {
    "integer-past-2^53": (b'"successRate": 9007199254740993', "success_rate", 9007199254740992.0),
    "integer-past-64-bits": (b'"successRate": 123456789012345678901234567890', "success_rate", 1.2345678901234568e29),
    "double-overflow-is-infinity": (b'"successRate": 1e400', "success_rate", float("inf")),
    "nul-in-string": (b'"title": "a\\u0000b"', "title", "a\x00b"),
    "duplicate-key-last-wins": (b'"title": "second"', "title", "second"),
    "unknown-field-nested-50": (
        deep(50),
        "extra",
        json.dumps({"deep": json.loads(deep(50)[8:])}, separators=(",", ":")),
    ),
}


@pytest.mark.parametrize("case", QUARANTINED)
def test_a_value_no_parser_or_column_takes_is_quarantined_alone(case):
    tail, field = QUARANTINED[case]
    quick, validated = decode(page(tail))
    assert quick is None  # the fast path leaves it to the validated path
    assert (validated.served, validated.records, validated.quarantined) == (3, 2, 1)
    [row] = validated.batches[-1].records.to_pylist()
    assert (row["record_index"], row["field"], row["page"]) == (1, field, 4), row["message"]
    assert row["raw"].startswith("{") and '"u1"' in row["raw"]
    rows = validated.batches[0].records.to_pylist()
    assert [r["user_id"] for r in rows] == ["u0", "u2"] and rows[0]["title"] == ACTIVE["title"]


@pytest.mark.parametrize("case", LOADED)
def test_a_value_that_loads_loads_the_same_on_both_paths(case):
    tail, column, expected = LOADED[case]
    quick, validated = decode(page(tail))
    assert (validated.records, validated.quarantined) == (3, 0)
    rows = validated.batches[0].records.to_pylist()
    assert rows[1][column] == expected and rows[0]["title"] == ACTIVE["title"]
    if quick is not None:
        assert [b.records.to_pylist() for b in quick.batches] == [b.records.to_pylist() for b in validated.batches]


@pytest.mark.parametrize(
    "body",
    [
        page(b'"title": "x\\ud800y"')[:-1],  # no closing bracket
        page(b'"title": "x\\ud800y"')[:-30],  # cut inside a record
        page(b'"title": "x\\ud800y"')[:200] + b'"]',  # cut inside a string
        b"[" + record(0) + b"," + b"]",  # a trailing comma
    ],
    ids=["no-closing-bracket", "cut-in-a-record", "cut-in-a-string", "trailing-comma"],
)
def test_a_body_cut_short_is_still_a_truncated_body(body):
    with pytest.raises(TruncatedBody):
        decode(body)


def test_split_json_array_follows_strings_and_escapes():
    items = [record(0), record(1, b'"t": "\\\\", "u": "\\"]"'), b"[1, [2]]", b'"]"', b"3"]
    assert split_json_array(b" [ " + b" , ".join(items) + b" ] ") == items
    assert split_json_array(b"[]") == []
    assert split_json_array(b'[{"a": "]"}') is None and split_json_array(b"{}") is None
