"""A run worker killed under `dagster dev` (SIGKILL: the OOM killer, a reboot) does not wedge the next run: the
run is marked failed, its `warehouse` pool slot is freed by the daemon's run monitoring (shipped instance
config), and the next scheduled run, whether it waited for that slot or was launched after, succeeds with the
warehouse equal to the platform."""

from __future__ import annotations

import os
import signal
import time

import pytest
from dagster import DagsterEventType
from dagster_dev import FINISHED, SCHEDULE, SCHEDULED, dagster_dev, pool_holders, run_worker_pid
from stack_helpers import assert_warehouse_equals_platform

from pipeline.stack import local_stack


@pytest.mark.slow
@pytest.mark.timeout(900)  # a loaded machine; about 2 minutes on a quiet one
def test_a_killed_run_worker_is_failed_its_slot_freed_and_the_next_scheduled_run_succeeds(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.sim.set_faults("latency_ms=150")  # a run long enough to be caught holding the pool
        with dagster_dev(tmp_path / "dagster_home", {**stack.run_env(), "LESSONSYNC_NIGHTLY_CRON": "* * * * *"}) as dev:
            instance = dev.instance()
            # The victim is launched by hand, at once: waiting for a minute tick to launch it too would double the
            # test's wait. The schedule's run then waits for the pool the victim holds.
            victim = dev.launch("nightly_sync", {})
            deadline = time.monotonic() + 300
            while (pid := run_worker_pid(instance, victim)) is None or victim not in pool_holders(instance):
                status = dev.runs(runIds=[victim])[0]["status"]
                assert status not in FINISHED, f"run {victim} ended ({status}) first"
                assert time.monotonic() < deadline, "the launched run never held the warehouse pool"
                time.sleep(0.2)
            os.kill(pid, signal.SIGKILL)
            killed_at = time.time()
            # a scheduled run that got the pool before the victim and ended before the kill proves nothing
            ended_before_kill = {r["runId"] for r in dev.runs(tags=SCHEDULED) if r["status"] in FINISHED}

            failed = dev.wait_for(victim, "the killed run to be marked failed", timeout=180)
            assert failed["status"] == "FAILURE"
            # Who noticed: the code server that launched the worker (DefaultRunLauncher has no worker health check
            # for the daemon to run); the daemon's part is the slot below.
            crash = [
                e.message
                for e in instance.all_logs(victim, of_type=DagsterEventType.ENGINE_EVENT)
                if "terminated by signal 9 (SIGKILL)" in (e.message or "")
            ]
            assert crash, "no engine event says the run worker was killed"
            print(f"\n{crash[0][:200]}")
            deadline = time.monotonic() + 180
            while victim in pool_holders(instance):
                assert time.monotonic() < deadline, f"the killed run {victim} still holds its warehouse slot"
                time.sleep(1)
            freed_after = time.time() - killed_at
            print(f"\nkilled run {victim}: FAILURE; its warehouse slot freed {freed_after:.0f} s after the kill")

            stack.sim.set_faults("")
            after = dev.wait_for_run(
                lambda runs: next((r for r in reversed(runs) if r["runId"] not in ended_before_kill), None),
                "the next scheduled run",
                tags=SCHEDULED,
            )
            assert after["status"] == "SUCCESS", dev.unsuccessful_runs()
            print(f"next scheduled run {after['runId']}: {after['status']}")
            dev.stop_schedule(SCHEDULE)
            dev.drain()
        assert_warehouse_equals_platform(stack)
