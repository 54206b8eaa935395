"""Date-times at the ends of the range, in every date field of every stream: a value that overflows once
converted to UTC (year 1 or 9999 with an offset) is quarantined alone with its field named, on both decoding
paths, and the rest of the page loads; the extremes that stay in range load the same on both paths."""

import copy

import orjson
import pytest

from pipeline.contract.streams import STREAMS
from pipeline.source.decoding import PageDecoder, PageLocation, arrow_page, timestamp_paths
from pipeline.source.fast_decoding import FastPages
from pipeline.source.fetching import SourceCore
from pipeline.source.paging import Request

RESOURCE = {
    "active_lessons": "active_lessons",
    "answers_by_user_lesson": "answers",
    "lesson_sessions": "lesson_sessions",
}
PATH_VALUES = {"answers_by_user_lesson": {"user_id": "u", "lesson_id": "L"}}
OVERFLOWING = [
    "9999-12-31T23:59:59-14:00",
    "9999-12-31T23:59:59.999999-00:01",
    "9999-12-31T12:00:00-12:00",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00.000+00:01",
    "0001-01-01 13:59:59+14:00",
]
IN_RANGE = [
    "9999-12-31T23:59:59.999999Z",
    "9999-12-31T23:59:59+14:00",
    "9999-12-31T09:59:59-14:00",
    "9999-12-31T23:59:59",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00-14:00",
    "0001-01-01T14:00:00+14:00",
    "0001-01-01T00:00:00",
]
CASES = [(stream, path) for stream in RESOURCE for path in timestamp_paths(STREAMS[stream].model)]


def test_every_date_field_of_every_stream_is_covered():
    dated = {name for name, stream in STREAMS.items() if timestamp_paths(stream.model)}
    assert dated - set(RESOURCE) <= {"answers_by_lesson", "answers_by_user"}  # the same model as answers_by_user_lesson
    assert len(CASES) == 8


def _page(sim, stream: str, path: tuple[str, ...], value: str) -> tuple[list, str]:
    """Five real records of the stream, the middle one carrying `value` at `path` (the first item of a list);
    and the field its quarantine row names."""
    records = [r for r in sim.ground_truth(RESOURCE[stream]) if "*" not in path or r.get(path[0])][:5]
    records = copy.deepcopy(records)
    target, field = records[2], []
    for step in path[:-1]:
        target = target[0] if step == "*" else target[step]
        field.append("0" if step == "*" else step)
    target[path[-1]] = value
    return records, ".".join([*field, path[-1]])


def _decode(stream_name: str, records: list):
    stream = STREAMS[stream_name]
    request = Request(stream, PATH_VALUES.get(stream_name, {}))
    where = PageLocation(stream.name, "/v1/x", 3, {"pageSize": "5"})
    key = SourceCore.key_getter(stream) if stream.pager == "records" else None
    body = orjson.dumps(records)
    validated = arrow_page(request, PageDecoder(stream).decode(body, where), key)
    fast = FastPages.for_stream(stream)
    quick = fast.page(request, body, where, key is not None) if fast is not None else None
    return quick, validated


@pytest.mark.parametrize("value", OVERFLOWING)
@pytest.mark.parametrize(("stream", "path"), CASES, ids=[f"{s}:{'.'.join(p)}" for s, p in CASES])
def test_a_date_overflowing_in_utc_is_quarantined_with_its_field_and_the_rest_loads(sim, stream, path, value):
    records, field = _page(sim, stream, path, value)
    quick, validated = _decode(stream, records)
    assert quick is None  # the fast path leaves it to the validated path, which quarantines
    assert (validated.served, validated.records, validated.quarantined) == (5, 4, 1)
    [row] = validated.batches[-1].records.to_pylist()
    assert validated.batches[-1].table.name == "quarantine"
    assert (row["stream"], row["record_index"], row["field"]) == (stream, 2, field)
    assert "out of range once converted to UTC" in row["message"]
    assert validated.batches[0].records.num_rows == 4
    for batch in validated.batches:  # every date-time that did load reads back as a Python date-time
        batch.records.to_pylist()


@pytest.mark.parametrize("value", IN_RANGE)
@pytest.mark.parametrize(("stream", "path"), CASES, ids=[f"{s}:{'.'.join(p)}" for s, p in CASES])
def test_the_extremes_that_stay_in_range_load_the_same_on_both_paths(sim, stream, path, value):
    records, _ = _page(sim, stream, path, value)
    quick, validated = _decode(stream, records)
    assert (validated.records, validated.quarantined) == (5, 0)
    for batch in validated.batches:
        batch.records.to_pylist()  # readable back as Python date-times
    if quick is not None:
        assert [b.records.to_pylist() for b in quick.batches] == [b.records.to_pylist() for b in validated.batches]
