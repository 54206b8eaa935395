"""The operations domain's definitions: the jobs over every domain, the nightly schedule, failure alerts,
the dead-run and platform-retry sensors, the executor every run uses and the console loggers runs may name."""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from pipeline.defs.operations.alerts import build_failure_alert_sensor
from pipeline.defs.operations.console import LOGGERS
from pipeline.defs.operations.jobs import check_warehouse_job, full_refresh_job, nightly_sync_job
from pipeline.defs.operations.lake_tables import build_lake_maintenance_job, build_lake_maintenance_schedule
from pipeline.defs.operations.runs.retry_sensor import build_retry_sensor
from pipeline.defs.operations.runs.sensor import dead_run_sensor
from pipeline.defs.operations.schedules import build_nightly_schedule
from pipeline.defs.resources import build_resources
from pipeline.settings import Settings


def build_defs(settings: Settings) -> Definitions:
    lake_maintenance = build_lake_maintenance_job(build_resources(settings)["warehouse"])
    return Definitions(
        jobs=[nightly_sync_job, full_refresh_job, check_warehouse_job, lake_maintenance],
        schedules=[build_nightly_schedule(settings.orchestration), build_lake_maintenance_schedule(lake_maintenance)],
        sensors=[build_failure_alert_sensor(settings), dead_run_sensor, build_retry_sensor(settings)],
        # Steps share one process: DuckDB allows one writer, and the raw sync's one step fetches concurrently.
        executor=in_process_executor,
        loggers=LOGGERS,
    )
