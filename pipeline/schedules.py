"""The nightly sync, on at deployment (Dagster's default for schedules is STOPPED)."""

from __future__ import annotations

import os

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from pipeline.jobs import nightly_sync_job
from pipeline.partitions import updated_daily

NIGHTLY_CRON = os.environ.get("LESSONSYNC_NIGHTLY_CRON", "0 2 * * *")


@schedule(
    job=nightly_sync_job,
    cron_schedule=NIGHTLY_CRON,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Nightly incremental sync of every stream (cron from LESSONSYNC_NIGHTLY_CRON, UTC).",
)
def nightly_sync_schedule(context: ScheduleEvaluationContext) -> RunRequest:
    # Partitioned assets need a partition key even though cursor runs ignore its range.
    tick = context.scheduled_execution_time
    partition_key = updated_daily.get_last_partition_key(current_time=tick)
    return RunRequest(run_key=f"nightly-{tick:%Y-%m-%d}", partition_key=partition_key)
