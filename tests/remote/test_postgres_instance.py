"""The Dagster instance on a real PostgreSQL: a single-run backfill and a run the certificate sensor asks
for are recorded there (runs, tags, materializations), visible through DagsterInstance queries."""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pytest
from dagster import AssetKey, DagsterRunStatus, RunRequest, RunsFilter, build_sensor_context
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster_postgres import PostgresRunStorage

from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.code_location import build_definitions
from pipeline.defs.policy import WRITES_WAREHOUSE
from pipeline.settings import load_settings
from pipeline.stack import environment
from pipeline.verify import compare_warehouse

SENSOR = "certificate_inbox_sensor"


@pytest.mark.slow
def test_a_single_run_backfill_and_a_sensor_run_are_recorded_in_postgres(remote_stack):
    stack, instance = remote_stack
    assert isinstance(instance.run_storage, PostgresRunStorage)
    stack.advance(hours=24)  # certificates delivered to the inbox

    end = stack.sim.now().date() - timedelta(days=1)
    start = end - timedelta(days=29)
    backfill = stack.sync(
        select=("group:progress",), backfill_range=(start.isoformat(), end.isoformat()), instance=instance
    )
    assert backfill.success, backfill.error
    runs = instance.get_runs(RunsFilter(job_name="backfill_progress"))
    assert [run.run_id for run in runs] == [backfill.run_id]  # the whole range: one run
    assert runs[0].run_config["resources"]["backfill"]["config"]["updated_from"] == start.isoformat()
    assert runs[0].status == DagsterRunStatus.SUCCESS
    latest = instance.get_latest_materialization_event(AssetKey(["lms", "active_lessons"]))
    assert latest is not None and latest.run_id == backfill.run_id

    with environment(stack.run_env()):  # the stack's settings: its data directory, platform and secret
        defs = build_definitions(load_settings())
        sensor = defs.get_sensor_def(SENSOR)
        inbox = InboxResource(path=str(stack.data_dir / "inbox.sqlite3"))
        with build_sensor_context(instance=instance, resources={"inbox": inbox}) as context:
            request = sensor(context)
        assert isinstance(request, RunRequest), request
        # What the daemon does with the request: a run of the sensor's target with its tags and the sensor's.
        tags = {**request.tags, SENSOR_NAME_TAG: SENSOR, RUN_KEY_TAG: request.run_key}
        job = defs.resolve_job_def(sensor.job_name)
        result = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
    assert result.success

    sensor_runs = instance.get_runs(RunsFilter(tags={SENSOR_NAME_TAG: SENSOR}))
    assert [run.run_id for run in sensor_runs] == [result.run_id]
    assert sensor_runs[0].status == DagsterRunStatus.SUCCESS and sensor_runs[0].tags.items() >= WRITES_WAREHOUSE.items()
    certificates = instance.get_latest_materialization_event(AssetKey(["lms", "certificates"]))
    assert certificates is not None and certificates.run_id == result.run_id
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim, tables=("certificates",))
    assert all(diff.equal for diff in diffs), [diff.summary() for diff in diffs]
    assert len(instance.get_runs()) == 2  # nothing else ran: both records come from this Postgres database
