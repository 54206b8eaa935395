"""Before a run: runs whose process died (SIGKILL, OOM killer, reboot) are reported failed and their pool
slots freed, through Dagster's own APIs, so they never wedge the `warehouse` pool for the runs after them.

Only runs that recorded their process (identity.py) on this host are judged: a run on another host, or one
that never said where it runs, is never touched, and neither is a live one."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from pipeline.runs.identity import HOST_TAG, recorded_process, this_host

logger = logging.getLogger("lessonsync.runs")

# NOT_STARTED too: an in-process run is created with its tags, then killed before its first event.
UNFINISHED = [DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED,
              DagsterRunStatus.CANCELING]


@dataclass(frozen=True)
class RecoveredRun:
    run_id: str
    job_name: str
    status: str
    message: str


def recover_dead_runs(instance: DagsterInstance, *, by: str = "lessonsync") -> list[RecoveredRun]:
    """Fail this host's unfinished runs whose process is gone, then free every slot a finished run still holds."""
    recovered = [_fail(instance, record.dagster_run, by) for record in instance.get_run_records(
        filters=RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: this_host()})) if _is_dead(record.dagster_run)]
    _free_slots_of_finished_runs(instance)
    return recovered


def _is_dead(run) -> bool:
    process = recorded_process(run.tags)
    return process is not None and process.host == this_host() and not process.is_alive()


def _fail(instance: DagsterInstance, run, by: str) -> RecoveredRun:
    process = recorded_process(run.tags)
    assert process is not None
    message = (f"Run {run.run_id} ({run.job_name}) was {run.status.value} but its process is gone (pid "
               f"{process.pid} on {process.host}, started at {process.started:.0f}, no longer runs: killed, out "
               f"of memory or a reboot). Marked failed by {by}; its pool slots are freed. The warehouse rolled "
               "back whatever that run had not committed: the next sync reads those windows again.")
    logger.warning(message)
    instance.report_run_failed(run, message)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    return RecoveredRun(run.run_id, run.job_name, run.status.value, message)


def _free_slots_of_finished_runs(instance: DagsterInstance) -> None:
    """A finished (or deleted) run holds no slot legitimately; the daemon frees these, `lessonsync sync` has none."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return
    for run_id in storage.get_concurrency_run_ids():
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            logger.info("freeing the pool slots still held by %s run %s", run.status.value if run else "deleted",
                        run_id)
            storage.free_concurrency_slots_for_run(run_id)
