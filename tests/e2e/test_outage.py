"""A platform outage in the middle of a sync: ridden out within LESSONSYNC_RETRY_BUDGET, a clear failure past it
(cursor unchanged, the failure alert sent)."""

import time

import duckdb
import pytest
from alert_receiver import alert_receiver, evaluate_failure_sensor
from dagster import DagsterInstance, SkipReason
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.defs.operations.alerts import alert_failed_sync
from pipeline.instance import SHIPPED_CONFIG
from pipeline.settings import load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.sync import SyncReport
from pipeline.warehouse import hooks


def _cursors(stack: Stack) -> dict[str, object]:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return dict(conn.execute("SELECT stream, cursor FROM lms._sync_state").fetchall())


def _sync_with_outage_midway(stack: Stack, outage_s: float) -> SyncReport:
    """Start a slowed sync and take every /v1 route down for `outage_s` as the active lessons' load commits: the
    answers planned from that load are being fetched meanwhile."""
    stack.sim.set_faults("latency_ms=30")
    started: list[float] = []

    def outage_at_first_commit(point: str) -> None:
        if point == "parts_written:active_lessons" and not started:
            started.append(time.monotonic())
            stack.sim.set_faults(f"latency_ms=30,outage_s={outage_s}")

    hooks.on_point(outage_at_first_commit)
    try:
        outcome = stack.sync(select=RAW)
    finally:
        hooks.on_point(None)
    assert started, "no load committed"
    assert stack.sim.stats()["faults"]["5xx"] > 0, "the outage answered no request"
    return outcome


@pytest.mark.slow
def test_an_outage_mid_sync_within_the_budget_is_ridden_out_and_the_warehouse_is_exact(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        stack.env["LESSONSYNC_RETRY_MAX_WAIT"] = "2"  # retry every 2 s at most, so the run resumes soon after
        # 20 s: several backed-off tries fail (a try every 2 s at most), well within the default 300 s budget
        report = _sync_with_outage_midway(stack, outage_s=20)
        assert report.success, report.error
        stack.sim.set_faults("")
        assert_warehouse_equals_platform(stack)


@pytest.mark.slow
def test_an_outage_longer_than_the_budget_fails_clearly_and_keeps_the_cursor(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        assert stack.sync(select=RAW).success
        cursors = _cursors(stack)
        stack.advance(hours=6)
        stack.env.update({"LESSONSYNC_RETRY_BUDGET": "4", "LESSONSYNC_RETRY_MAX_WAIT": "1"})
        stack.sim.set_faults("outage_s=3600")  # down from before the run starts, so no stream commits
        instance = DagsterInstance.ephemeral()
        report = stack.sync(select=RAW, instance=instance)
        assert not report.success
        assert "last status 503" in report.error and " /v1/" in report.error, report.error
        assert "LESSONSYNC_RETRY_BUDGET" in report.error
        assert _cursors(stack) == cursors
        # An in-process run is alerted by its own process (as `lessonsync sync` does); the daemon's sensor skips it.
        with alert_receiver() as receiver:
            env = {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url}
            assert isinstance(evaluate_failure_sensor(instance, report.run_id, env), SkipReason)
            with environment({**stack.env, **env}):
                settings = load_settings()
            assert alert_failed_sync(report.run_id, report.job_name, report.step_errors, report.error, settings) is None
        assert [alert["run_id"] for alert in receiver.bodies] == [report.run_id]
        assert "last status 503" in receiver.bodies[0]["error"]


def test_the_shipped_instance_retries_only_runs_tagged_retryable(tmp_path):
    (tmp_path / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with DagsterInstance.from_config(str(tmp_path)) as instance:  # which runs: tests/test_run_retries.py
        assert instance.run_retries_enabled and not instance.run_retries_retry_on_asset_or_op_failure
        assert instance.run_retries_max_retries == 0
