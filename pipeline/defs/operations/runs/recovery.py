"""Before a run: runs whose process died (SIGKILL, OOM killer, reboot) are reported failed and their pool
slots freed, through Dagster's own APIs, so they never wedge the `warehouse` pool for the runs after them.

Only runs that recorded their process (identity.py) on this host are judged: a run on another host, or one
that never said where it runs, is never touched, and neither is a live one."""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from pipeline.defs.operations.runs.identity import HOST_TAG, recorded_process, this_host

# On a run this module failed: who did (a run, the sensor, `lessonsync recover`). Its process, gone, sent no alert.
MARKED_FAILED_BY_TAG = "lessonsync/marked-failed-by"
# NOT_STARTED too: an in-process run is created with its tags, then killed before its first event.
UNFINISHED = [
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def recover_dead_runs(instance: DagsterInstance, *, by: str = "lessonsync") -> list[str]:
    """Fail this host's unfinished runs whose process is gone, then free every slot a finished run still holds;
    returns what it did, one message per run."""
    messages = [
        fail_run(instance, record.dagster_run, by)
        for record in instance.get_run_records(filters=RunsFilter(statuses=UNFINISHED, tags={HOST_TAG: this_host()}))
        if _is_dead(record.dagster_run)
    ]
    return messages + _free_slots_of_finished_runs(instance)


def _is_dead(run: DagsterRun) -> bool:
    process = recorded_process(run.run_id, run.tags)
    return process is not None and process.host == this_host() and not process.is_alive()


def fail_run(instance: DagsterInstance, run: DagsterRun, by: str) -> str:
    """Report `run` failed with a message saying why, and free its pool slots."""
    process = recorded_process(run.run_id, run.tags)
    where = (
        "its process"
        if process is None
        else (
            f"its process (pid {process.pid} on {process.host}, started "
            f"{datetime.fromtimestamp(process.started, UTC):%Y-%m-%d %H:%M:%S} UTC)"
        )
    )
    message = (
        f"Run {run.run_id} ({run.job_name}) was {run.status.value} but {where} is gone: killed, out of "
        f"memory or a reboot. Marked failed by {by}; its pool slots are freed. The warehouse rolled back "
        "whatever that run had not committed: the next sync reads those windows again."
    )
    instance.add_run_tags(run.run_id, {MARKED_FAILED_BY_TAG: by})
    instance.report_run_failed(run, message)
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    return message


def _free_slots_of_finished_runs(instance: DagsterInstance) -> list[str]:
    """A finished (or deleted) run holds no slot legitimately; the daemon frees these, `lessonsync sync` has none."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return []
    messages = []
    for run_id in sorted(storage.get_concurrency_run_ids()):
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            messages.append(
                f"Freed the pool slots still held by {run.status.value if run else 'deleted'} run {run_id}."
            )
    return messages
