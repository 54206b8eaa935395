"""Exact whichever of the platform's clocks runs ahead, and under a read lag within the lookback: real
Dagster runs against the simulator with its `Date` header offset from the clock that stamps lastDate, or
its listings lagging behind it (pipeline/raw/windows.py proves the cursor rule these exercise)."""

import logging
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from dagster import DagsterInstance
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import Stack, local_stack
from pipeline.verify import compare_warehouse

SKEW_KEY = "platform_clock_skew_s"


def _metadata(report, key):
    assert report.success, report.error
    return report.materializations[key]


def _cursors(stack: Stack) -> dict[str, datetime]:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        rows = conn.execute(
            "SELECT stream, cursor FROM lms._sync_state WHERE stream IN ('active_lessons', 'answers')"
        ).fetchall()
    return {stream: cursor.astimezone(UTC) for stream, cursor in rows}


def _newest_last_date(stack: Stack) -> datetime:
    return max(datetime.fromisoformat(a["lastDate"]) for a in stack.sim.ground_truth("active_lessons"))


def _full_day_incremental(stack: Stack, instance: DagsterInstance | None = None):
    """Full sync, one simulated day, incremental sync: returns the incremental run's report."""
    assert stack.sync(select=RAW).success
    stack.advance(hours=24)
    return stack.sync(select=RAW, instance=instance)


def _warnings(instance: DagsterInstance, run_id: str, needle: str) -> list[str]:
    return [
        e.user_message
        for e in instance.all_logs(run_id)
        if e.level == logging.WARNING and needle in (e.user_message or "")
    ]


@pytest.mark.slow
@pytest.mark.parametrize("offset_min", [120, -120], ids=["date-2h-ahead", "date-2h-behind"])
def test_a_date_header_hours_off_the_lastdate_clock_loses_nothing(tmp_path, offset_min):
    with (
        local_stack(tmp_path / "data", scale="tiny", faults=f"date_offset_min={offset_min}") as stack,
        DagsterInstance.ephemeral() as instance,
    ):
        incremental = _full_day_incremental(stack, instance)
        assert_warehouse_equals_platform(stack)  # active lessons, answers and answer results included
        active, answers = _metadata(incremental, "lms/active_lessons"), _metadata(incremental, "lms/answers")
        assert answers["refetched_active_lessons"] > 0 and answers["rows_fetched"] > 0  # changed lessons' answers
        newest, now = _newest_last_date(stack), stack.sim.now()
        expected_skew = offset_min * 60 + (now - newest).total_seconds()
        assert abs(active[SKEW_KEY] - expected_skew) < 5, (active[SKEW_KEY], expected_skew)
        # Beyond the lookback (10 min) either way: one warning naming both instants.
        warned = _warnings(instance, incremental.run_id, "platform clocks")
        assert len(warned) == (abs(expected_skew) > 600)
        assert all(newest.isoformat() in w and "lookback" in w for w in warned)
        # The cursor never passes the newest lastDate listed, nor the Date header's run start minus the margin.
        cursors = _cursors(stack)
        assert cursors["active_lessons"] <= min(newest, now + timedelta(minutes=offset_min))
        assert cursors["answers"] <= cursors["active_lessons"]


@pytest.mark.slow
def test_a_window_that_lists_nothing_keeps_its_cursor(tmp_path):
    """A cursor past every lastDate but behind the Date header (2 h ahead): the old rule moved it up to the
    header's run start though the window listed nothing; it stays."""
    with local_stack(tmp_path / "data", scale="tiny", faults="date_offset_min=120") as stack:
        assert stack.sync(select=("group:progress",)).success
        parked = stack.sim.now() + timedelta(hours=1)
        with duckdb.connect(str(stack.warehouse_path)) as conn:
            conn.execute(
                "UPDATE lms._sync_state SET cursor = ? WHERE stream IN ('active_lessons', 'answers')", [parked]
            )
        quiet = stack.sync(select=("group:progress",))
        assert _metadata(quiet, "lms/active_lessons")["rows_fetched"] == 0
        assert _metadata(quiet, "lms/answers")["rows_fetched"] == 0
        assert _cursors(stack) == {"active_lessons": parked, "answers": parked}


@pytest.mark.slow
def test_a_read_lag_shorter_than_the_lookback_loses_nothing(tmp_path):
    """Listings show a record 6 h after its lastDate (lookback 8 h): the lagging sync cannot see the last
    hours' changes, but its cursor stays behind them, so once they show the next sync has them all."""
    lag = timedelta(hours=6)
    with local_stack(tmp_path / "data", scale="tiny", faults=f"read_lag_min={lag.total_seconds() / 60}") as stack:
        stack.env["LESSONSYNC_LOOKBACK"] = "PT8H"
        lagging = _full_day_incremental(stack)
        assert _metadata(lagging, "lms/active_lessons")["rows_fetched"] > 0
        now = stack.sim.now()
        hidden = [
            a for a in stack.sim.ground_truth("active_lessons") if datetime.fromisoformat(a["lastDate"]) > now - lag
        ]
        assert hidden  # the hazard is real: the lagging sync could not see these
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            assert any(not d.equal for d in compare_warehouse(conn, stack.sim))
        assert max(_cursors(stack).values()) <= now - lag  # bounded by what the lagging replica showed

        stack.sim.set_faults("")  # the replica catches up
        caught_up = stack.sync(select=RAW)
        assert_warehouse_equals_platform(stack)
        assert _metadata(caught_up, "lms/answers")["refetched_active_lessons"] > 0
