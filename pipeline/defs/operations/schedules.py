"""The nightly sync, on at deployment (Dagster's default for schedules is STOPPED)."""

from __future__ import annotations

from dagster import DefaultScheduleStatus, RunRequest, ScheduleEvaluationContext, schedule

from pipeline.jobs import nightly_sync_job
from pipeline.settings import load_settings


@schedule(
    job=nightly_sync_job,
    cron_schedule=load_settings().nightly_cron,
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.RUNNING,
    description="Nightly incremental sync of every stream (cron from LESSONSYNC_NIGHTLY_CRON, UTC).",
)
def nightly_sync_schedule(context: ScheduleEvaluationContext) -> RunRequest:
    # One run per tick, whatever the cron: a key per day would drop every tick of a day but the first.
    tick = context.scheduled_execution_time
    return RunRequest(run_key=f"nightly-{tick:%Y-%m-%dT%H:%MZ}")
