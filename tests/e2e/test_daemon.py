"""The UI path as users run it: `dagster dev` (webserver + daemon) with a minute cron against the simulator.
The daemon launches a scheduled run that succeeds, the sensor launches a certificates run after webhook
deliveries, a backfill and a `nightly_sync` launched through GraphQL as the Launchpad does (no partition to
pick) succeed, and the warehouse then equals the platform's ground truth."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from dagster_dev import SCHEDULE, SCHEDULED, created_after, dagster_dev
from stack_helpers import assert_warehouse_equals_platform

from pipeline.stack import local_stack

SENSED = [{"key": "dagster/sensor_name", "value": "certificate_inbox_sensor"}]
WRITES = ("lessonsync/writes-warehouse", "true")
DAEMON_ENV = {"LESSONSYNC_NIGHTLY_CRON": "* * * * *", "LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL": "5"}


@pytest.mark.slow
@pytest.mark.timeout(900)  # a loaded machine; about 2 minutes on a quiet one
def test_daemon_runs_the_schedule_the_sensor_and_a_backfill_and_the_warehouse_is_exact(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        with dagster_dev(tmp_path / "dagster_home", {**stack.run_env(), **DAEMON_ENV}) as dev:
            # The daemon's first tick. Then the schedule goes off: a run a minute would queue up on a busy machine.
            first = dev.wait_for_run(created_after(0), "the first scheduled run", finished=False, tags=SCHEDULED)
            dev.stop_schedule(SCHEDULE)
            first = dev.wait_for(first["runId"], "the first scheduled run")
            assert first["status"] == "SUCCESS", dev.log_tail()
            assert first["jobName"] == "nightly_sync" and WRITES in first["tags"].items()
            print(f"\nscheduled run {first['runId']}: {first['status']}")
            # What the asset page shows after a cursor run: an unpartitioned asset, materialized by that run.
            for path in (("lms", "active_lessons"), ("lms", "answers")):
                health = dev.asset_health(*path)
                print(f"{'/'.join(path)} after the scheduled run: {health}")
                assert health["isPartitioned"] is False and health["partitionStats"] is None
                assert health["assetMaterializations"][0]["runId"] == first["runId"]

            advanced_at = time.time()
            stack.advance(hours=24)  # a day of activity; its certificate webhooks are in the inbox now
            certificates = dev.wait_for_run(created_after(advanced_at), "the sensor's certificates run", tags=SENSED)
            assert certificates["status"] == "SUCCESS", dev.log_tail()
            assert certificates["jobName"] == "load_certificates" and WRITES in certificates["tags"].items()

            today = stack.sim.now().date()
            range_ = {"updated_from": str(today - timedelta(days=2)), "updated_to": str(today - timedelta(days=1))}
            backfill = dev.wait_for(
                dev.launch("backfill_progress", {"resources": {"backfill": {"config": range_}}}), "the backfill"
            )
            assert backfill["status"] == "SUCCESS", dev.log_tail()
            assert backfill["tags"]["lessonsync/window"] == "backfill" and WRITES in backfill["tags"].items()

            # The Launchpad's nightly_sync with nothing to pick: the snapshots changed by the advance come in too.
            nightly = dev.wait_for(dev.launch("nightly_sync", {}), "nightly_sync launched by hand")
            assert nightly["status"] == "SUCCESS", dev.log_tail()
            dev.drain()
            assert dev.unsuccessful_runs() == []
            assert "superseded" not in dev.log_tail(100_000)  # QUIET (dagster_dev.py) quiets the "use dg dev" notice
        assert_warehouse_equals_platform(stack)
