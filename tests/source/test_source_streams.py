"""Every stream, over real HTTP against the simulator, equals the ground truth row for row, field for field."""

import logging

import httpx
import pyarrow as pa
import pytest
from conftest import all_pairs, client_settings, rows_by_table, truth
from source_expect import assert_same_table, expected_tables

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.source.client import PlatformClient
from simulator import SimulatorConfig, start_simulator


def test_snapshot_streams_equal_ground_truth(sim, client):
    snapshots = [stream for stream in SYNC_STREAMS.values() if stream.kind == "snapshot"]
    expected = expected_tables(
        truth(sim, "categories", "groups", "users", "group_members", "lesson_sessions", "lessons")
    )
    got = rows_by_table(b for stream in snapshots for b in client.iter_stream(stream.name))
    for table in (table for stream in snapshots for table in stream.table_names):
        assert_same_table(table, got[table], expected[table])
    assert len(got["users"]) > len({r["id"] for r in got["users"]})  # yielded once per group, as documented
    assert len(expected["lesson_questions"]) > 0 and len(expected["lesson_session_registrations"]) > 0


@pytest.mark.slow
def test_active_lessons_and_answers_equal_ground_truth(sim, client, caplog):
    caplog.set_level(logging.INFO, logger="lessonsync.source")
    expected = expected_tables(truth(sim, "active_lessons", "answers"))
    active = rows_by_table(client.iter_stream("active_lessons"))["active_lessons"]
    stats = client.last_run_stats()
    assert stats.complete and stats.passes == 1 and stats.pages == -(-len(active) // 7)
    assert stats.server_time_at_start is not None and stats.server_time_at_start <= sim.now()
    assert_same_table("active_lessons", active, expected["active_lessons"])
    assert f"active_lessons done: {stats.pages} pages, {len(active)} records" in caplog.text  # progress log
    answers = rows_by_table(client.iter_answers(all_pairs(active)))
    stats = client.last_run_stats()
    assert stats.complete and stats.quarantined == 0 and stats.planned_requests > 0
    assert_same_table("answers", answers["answers"], expected["answers"])
    assert_same_table("answer_results", answers["answer_results"], expected["answer_results"])


@pytest.mark.slow
def test_answer_listings_with_empty_pages_mid_stream_are_read_to_the_end(sim):
    """A reader that stops on an empty page loses answers here; the client does not."""
    token = httpx.post(f"{sim.base_url}/v1/token", json={"appSecret": sim.config.app_secret}).json()["access_token"]
    lesson_ids = sorted({a["_lessonId"] for a in sim.ground_truth("active_lessons")})
    per_lesson = {lesson: 0 for lesson in lesson_ids}
    for answer in sim.ground_truth("answers"):
        per_lesson[answer["_lessonId"]] += 1
    lost = 0
    with httpx.Client(base_url=sim.base_url, headers={"Authorization": f"Bearer {token}"}) as http:
        for lesson in lesson_ids:
            naive, page = 0, 1
            while True:
                rows = http.get(
                    f"/v1/lessons/{_quote(lesson)}/answers",
                    params={"pageSize": 3, "pageNumber": page, "includeArchived": "true", "includeEntryQuiz": "true"},
                ).json()
                if not rows:
                    break
                naive, page = naive + len(rows), page + 1
            lost += per_lesson[lesson] - naive
    assert lost > 0  # empty pages do occur before the end of some listings
    pairs = pa.table(
        {
            "user_id": [a["_userId"] for a in sim.ground_truth("active_lessons")],
            "lesson_id": [a["_lessonId"] for a in sim.ground_truth("active_lessons")],
        }
    )
    with PlatformClient(client_settings(sim, page_size=3)) as small_pages:
        answers = rows_by_table(small_pages.iter_answers(pairs))["answers"]
    assert len({(a["active_lesson_id"], a["quiz_type"], a["attempt_index"], a["question_id"]) for a in answers}) == sum(
        per_lesson.values()
    )


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def test_zero_based_platform_is_probed_and_read_exactly():
    with start_simulator(SimulatorConfig(seed=7, scale="tiny", first_page=0)) as zero_based:
        with PlatformClient(client_settings(zero_based, first_page="auto")) as client:
            assert client.first_page() == 0
            active = rows_by_table(client.iter_stream("active_lessons"))["active_lessons"]
            lessons = rows_by_table(client.iter_stream("lessons"))["lessons"]
        expected = expected_tables(truth(zero_based, "active_lessons", "lessons"))
    assert_same_table("active_lessons", active, expected["active_lessons"])
    assert_same_table("lessons", lessons, expected["lessons"])


def test_iter_stream_rejects_what_it_cannot_do(client):
    with pytest.raises(ValueError, match="iter_answers"):
        client.iter_stream("answers")
    with pytest.raises(ValueError, match="unknown stream 'nope'"):
        client.iter_stream("nope")
    with pytest.raises(ValueError, match="snapshot"):
        from datetime import UTC, datetime

        client.iter_stream("groups", updated_since=datetime(2026, 1, 1, tzinfo=UTC))
