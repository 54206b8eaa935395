"""Under the daemon: a run that failed because the platform was unavailable (tagged `lessonsync/retry=after-backoff`
by retry_policy.py) is launched again once it has been over for a back-off, not at once: an outage that lasted a
whole retry budget is likely still there a second later, and each try holds the writer's run slot for a budget.
Between the failure and the retry nothing is held, so queued runs (a certificate load) go ahead meanwhile.

Dagster 1.13's run retries have no delay setting, so this sensor asks for the retry itself, with public APIs only:
a RunRequest of the same job, asset selection, config and tags (the whole selection again: each stream's commit is
idempotent, its cursor moves only with its rows), keyed by the failed run so that it is asked for once."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from dagster import (
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from pipeline.defs.certificates.jobs import load_certificates_job
from pipeline.defs.operations.jobs import full_refresh_job, nightly_sync_job
from pipeline.defs.operations.runs.retry_policy import (
    AFTER_BACKOFF,
    REQUESTED,
    RETRY_NUMBER_TAG,
    RETRY_OF_TAG,
    RETRY_TAG,
)
from pipeline.defs.progress.jobs import backfill_progress_job
from pipeline.settings import Settings

# Every job whose runs retry_policy_hook tags
RETRIED_JOBS = (nightly_sync_job, full_refresh_job, backfill_progress_job, load_certificates_job)

RETRY_CHECK_SECONDS = 30
# Failed runs younger than this are looked at: longer than any back-off of the default budget's
LOOK_BACK = timedelta(days=1)


def backoff_seconds(retry_budget: float, retry_number: int) -> float:
    """How long retry `retry_number` (1, 2) waits after the failed run's end: the retry budget the platform was tried
    for, then twice that (the default budget: 5, then 10 minutes)."""
    return retry_budget * 2.0 ** (retry_number - 1)


def retry_of(run: DagsterRun, retry_number: int) -> RunRequest:
    """The run again: its job, selection, config and own tags, numbered (Dagster's `dagster/` tags are its own)."""
    kept = {k: v for k, v in run.tags.items() if not k.startswith("dagster/") and k != RETRY_TAG}
    return RunRequest(
        run_key=f"retry-of-{run.run_id}",
        job_name=run.job_name,
        run_config=dict(run.run_config),
        tags={**kept, RETRY_NUMBER_TAG: str(retry_number), RETRY_OF_TAG: run.tags.get(RETRY_OF_TAG, run.run_id)},
        asset_selection=sorted(run.asset_selection, key=str) if run.asset_selection is not None else None,
        asset_check_keys=sorted(run.asset_check_selection, key=str) if run.asset_check_selection is not None else None,
    )


def build_retry_sensor(settings: Settings) -> SensorDefinition:
    """The sensor for `settings`: its back-off follows LESSONSYNC_RETRY_BUDGET."""
    retried = {job.name for job in RETRIED_JOBS}

    @sensor(
        name="platform_retry_sensor",
        jobs=list(RETRIED_JOBS),
        minimum_interval_seconds=RETRY_CHECK_SECONDS,
        default_status=DefaultSensorStatus.RUNNING,
        description="Launches a run that failed because the platform was unavailable again once it has been over "
        "for a back-off (the retry budget, then twice it), at most twice.",
    )
    def platform_retry_sensor(context: SensorEvaluationContext) -> list[RunRequest] | SkipReason:
        instance, now = context.instance, time.time()
        failed = RunsFilter(
            statuses=[DagsterRunStatus.FAILURE],
            tags={RETRY_TAG: AFTER_BACKOFF},
            updated_after=datetime.now(UTC) - LOOK_BACK,
        )
        requests, waiting = [], []
        for record in instance.get_run_records(filters=failed):
            run = record.dagster_run
            if run.job_name not in retried:
                continue
            number = int(run.tags.get(RETRY_NUMBER_TAG, "0")) + 1
            due = (record.end_time or now) + backoff_seconds(settings.retry_budget, number)
            if due > now:
                waiting.append(f"{run.run_id} (retry {number} in {due - now:.0f} s)")
                continue
            requests.append(retry_of(run, number))
            instance.add_run_tags(run.run_id, {RETRY_TAG: REQUESTED})
            context.log.info(f"retrying run {run.run_id} of {run.job_name} (retry {number}): the platform was down")
        if requests:
            return requests
        return SkipReason("waiting to retry " + ", ".join(waiting) if waiting else "no run waits for a retry")

    return platform_retry_sensor
