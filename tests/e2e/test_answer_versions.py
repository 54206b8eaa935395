"""Answers are asked only for active lessons whose version (lastDate) differs from the one whose answers the
warehouse holds (lms.answers_synced_versions): real Dagster runs against the simulator over HTTP."""

from datetime import timedelta

import duckdb
import pytest
from dagster import DagsterInstance
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import environment, local_stack
from pipeline.warehouse import hooks

PROGRESS = ("group:progress",)


def _answers(report):
    assert report.success, report.error
    return report.materializations["lms/answers"]


def _checks_of(instance, run_id):
    """The (table, check) pairs a run planned and those it evaluated."""
    planned, evaluated = set(), set()
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event and event.event_type_value == "ASSET_CHECK_EVALUATION_PLANNED":
            key = event.event_specific_data.asset_check_key
            planned.add((key.asset_key.path[-1], key.name))
        elif event and event.event_type_value == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            evaluated.add((data.asset_key.path[-1], data.check_name))
    return planned, evaluated


def _query(stack, sql, params=()):
    with duckdb.connect(str(stack.warehouse_path)) as conn:
        return conn.execute(sql, list(params)).fetchall()


@pytest.mark.slow
def test_no_change_run_asks_for_no_answers_a_changed_version_is_asked_again_and_window_mode_asks_all(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        full = _answers(stack.sync(select=RAW))
        assert full["refetched_active_lessons"] == full["window_active_lessons"] > 0
        versions = _query(stack, "SELECT count(*) FROM lms.answers_synced_versions")[0][0]
        assert versions == _query(stack, "SELECT count(*) FROM lms.active_lessons")[0][0]

        # Nothing changed: the lookback re-reads active lessons, but every version is held -> no answer request.
        stack.advance(hours=0.05)
        instance = DagsterInstance.ephemeral()
        quiet_run = stack.sync(select=PROGRESS, instance=instance)
        quiet = _answers(quiet_run)
        # ... and the checks of the tables of which it changed no row are not evaluated again (not every row since
        # the full sync): planned, never evaluated, Dagster records them skipped and the full sync's results stand;
        # the blocking key check, which gates what reads the table, passes on that ground
        planned, evaluated = _checks_of(instance, quiet_run.run_id)
        assert ("answers", "links_to_active_lessons") in planned
        assert evaluated == {
            (table, "key_unique_not_null") for table in ("active_lessons", "answers", "answer_results")
        }
        assert quiet["refetched_active_lessons"] == 0
        assert quiet["planned_requests"] == 0
        assert quiet["rows_fetched"] == 0
        assert quiet["requests"] <= 1  # at most the token exchange; no listing

        # One active lesson whose answers we lost, its version older than the warehouse's active lesson, its
        # lastDate BEFORE the answers cursor (in the lookback part of the next window): it is asked again.
        owner, user, lesson, last = _query(
            stack,
            "SELECT a.owner_id, a.user_id, a.lesson_id, a.last_date FROM lms.active_lessons a "
            "WHERE EXISTS (SELECT 1 FROM lms.answers s WHERE s.user_id = a.user_id AND s.lesson_id = a.lesson_id) "
            "ORDER BY a.last_date DESC LIMIT 1",
        )[0]
        _query(stack, "UPDATE lms._sync_state SET cursor = ? WHERE stream = 'answers'", [last + timedelta(minutes=5)])
        _query(
            stack,
            "UPDATE lms.answers_synced_versions SET last_date = last_date - INTERVAL 1 DAY "
            "WHERE owner_id = ? AND user_id = ? AND lesson_id = ?",
            [owner, user, lesson],
        )
        _query(
            stack,
            "DELETE FROM lms.answer_results WHERE active_lesson_id IN (SELECT active_lesson_id FROM "
            "lms.answers WHERE user_id = ? AND lesson_id = ?)",
            [user, lesson],
        )
        _query(stack, "DELETE FROM lms.answers WHERE user_id = ? AND lesson_id = ?", [user, lesson])
        again_run = stack.sync(select=PROGRESS, instance=instance)
        again = _answers(again_run)
        # the answers it wrote are checked again; the active lessons, of which it wrote none, are not
        planned, evaluated = _checks_of(instance, again_run.run_id)
        assert ("answers", "links_to_active_lessons") in evaluated
        assert ("answer_results", "key_unique_not_null") in evaluated
        assert {check for check in evaluated if check[0] == "active_lessons"} == {
            ("active_lessons", "key_unique_not_null")
        }
        assert again["refetched_active_lessons"] == 1
        assert again["planned_requests"] == 1 and again["requests"] <= 6  # token, page probe, page, confirm
        assert again["rows_inserted"] > 0
        assert_warehouse_equals_platform(stack)
        assert (
            _query(
                stack,
                "SELECT last_date FROM lms.answers_synced_versions WHERE owner_id = ? AND user_id = ? "
                "AND lesson_id = ?",
                [owner, user, lesson],
            )[0][0]
            == last
        )

        # LESSONSYNC_ANSWERS_REFETCH=window asks for every active lesson of the window; the default, over the
        # same (3-day) window right after, for none: every version is held.
        cursor = _query(stack, "SELECT cursor FROM lms._sync_state WHERE stream = 'answers'")[0][0]
        _query(stack, "UPDATE lms._sync_state SET cursor = ? WHERE stream = 'answers'", [cursor - timedelta(days=3)])
        with environment({"LESSONSYNC_ANSWERS_REFETCH": "window"}):
            whole = _answers(stack.sync(select=PROGRESS))
        assert whole["refetched_active_lessons"] == whole["window_active_lessons"] > 1
        assert whole["planned_requests"] > 0
        _query(stack, "UPDATE lms._sync_state SET cursor = ? WHERE stream = 'answers'", [cursor - timedelta(days=3)])
        changed = _answers(stack.sync(select=PROGRESS))
        assert changed["window_active_lessons"] > 1 and changed["refetched_active_lessons"] == 0
        assert_warehouse_equals_platform(stack)


@pytest.mark.slow
def test_answers_failing_after_active_lessons_committed_lose_nothing(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)

        commits = []

        def fail_second_commit(point: str) -> None:  # active lessons commit first, then answers: fail that one
            if point == "parts_written":
                commits.append(point)
                if len(commits) == 2:
                    raise RuntimeError("planted failure before the answers commit")

        hooks.on_point(fail_second_commit)
        try:
            failed = stack.sync(select=PROGRESS)
        finally:
            hooks.on_point(None)
        assert not failed.success and "planted failure" in failed.error
        assert "lms/active_lessons" in failed.materializations and "lms/answers" not in failed.materializations
        held = _query(
            stack,
            "SELECT count(*) FROM lms.active_lessons a JOIN lms.answers_synced_versions v "
            "USING (owner_id, user_id, lesson_id) WHERE a.last_date IS DISTINCT FROM v.last_date",
        )[0][0]
        assert held > 0  # the new active lessons are in, their answers' versions are not

        after = _answers(stack.sync(select=RAW))
        assert after["refetched_active_lessons"] >= held
        assert_warehouse_equals_platform(stack)
