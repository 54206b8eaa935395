"""The nightly sync, on at deployment (Dagster's default for schedules is STOPPED)."""

from __future__ import annotations

from dagster import DefaultScheduleStatus, RunRequest, ScheduleDefinition, ScheduleEvaluationContext, schedule

from pipeline.defs.operations.jobs import nightly_sync_job
from pipeline.settings import OrchestrationSettings


def build_nightly_schedule(settings: OrchestrationSettings) -> ScheduleDefinition:
    """The schedule of the nightly_sync job, on Settings.nightly_cron (UTC)."""
    return schedule(
        name="nightly_sync_schedule",
        job=nightly_sync_job,
        cron_schedule=settings.nightly_cron,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Nightly incremental sync of every stream (cron from LESSONSYNC_NIGHTLY_CRON, UTC).",
    )(nightly_run_request)


def nightly_run_request(context: ScheduleEvaluationContext) -> RunRequest:
    # One run per tick, whatever the cron: a key per day would drop every tick of a day but the first.
    tick = context.scheduled_execution_time
    return RunRequest(run_key=f"nightly-{tick:%Y-%m-%dT%H:%MZ}")
