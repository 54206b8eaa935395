"""What the Dagster instance knows of an asset's last run, for `lessonsync status`: the run that last planned to
materialize it, whether it did, when, and the first line of the error when it did not. Read through the
instance's public API only, from the Dagster home the syncs record their runs in.

A retry that was interrupted (terminated from the UI, the run worker stopped) did not fail on its own: its error
is the one of the run it retried (the run's parent: Dagster's re-execution records it, and the daemon's retries tag
it `dagster/parent_run_id` too), walked back to the first failure that was not an interruption."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dagster import AssetKey, DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus

from pipeline.settings import Settings

if TYPE_CHECKING:
    from dagster_shared.error import SerializableErrorInfo  # the error of Dagster's failure events

Outcome = Literal["succeeded", "failed", "running"]
PARENT_RUN_TAG = "dagster/parent_run_id"  # the daemon's run retries: the run retried (also in DagsterRun.parent_run_id)
# Root exception classes of a step stopped from outside (termination, SIGINT/SIGTERM; DuckDB's InterruptException
# when the signal lands in a statement): the step did not fail itself.
_INTERRUPTIONS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt", "InterruptException"}
_FINISHED_UNSUCCESSFULLY = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
_UNFINISHED = {
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
}


@dataclass(frozen=True)
class LastRun:
    run_id: str
    outcome: Outcome  # of the asset in that run: a failed run may still have materialized it
    at: datetime | None  # when the run ended (started, while it runs)
    error: str | None = None  # the first line of the error that stopped the asset's step (or the run)
    asset: str = ""  # the asset this outcome is of (a stream loads several)
    error_run_id: str | None = None  # the run `error` was recorded in: an earlier run when this one was a retry


@dataclass(frozen=True)
class _Failure:
    line: str | None  # the first line of the error, None when none was recorded
    interrupted: bool  # stopped from outside, or canceled before a step failed: not a cause of its own


def instance_home(settings: Settings) -> Path:
    """Where the syncs record their runs: DAGSTER_HOME, else the data directory's Dagster home."""
    return Path(os.environ.get("DAGSTER_HOME") or settings.dagster_home)


def open_instance(settings: Settings) -> DagsterInstance | None:
    """The instance the syncs record their runs in, or None when no run was ever recorded there (never created)."""
    home = instance_home(settings)
    if not (home / "dagster.yaml").exists():
        return None
    from pipeline.instance import ensure_dagster_home  # exports the Postgres URL when the settings use one

    return DagsterInstance.from_config(str(ensure_dagster_home(settings)))


def last_run(instance: DagsterInstance, key: AssetKey) -> LastRun | None:
    """The last run that planned to materialize `key` and what became of the asset in it; None when no run did."""
    planned = instance.fetch_planned_materializations(key, limit=1).records
    if not planned:
        return None
    entry = planned[0].event_log_entry
    record = instance.get_run_record_by_id(entry.run_id)
    if record is None:
        return None
    run = record.dagster_run
    ended = record.end_time or record.start_time or record.create_timestamp.timestamp()
    at = datetime.fromtimestamp(ended, UTC) if ended else None
    latest = instance.get_latest_materialization_event(key)
    if latest is not None and latest.run_id == run.run_id:
        return LastRun(run.run_id, "succeeded", at, asset=key.to_user_string())
    if run.status in _UNFINISHED:
        return LastRun(run.run_id, "running", at, asset=key.to_user_string())
    step_key = entry.dagster_event.step_key if entry.dagster_event else None
    error, error_run_id = _root_cause(instance, run, step_key)
    if run.status not in _FINISHED_UNSUCCESSFULLY and error is None:
        error = "the run succeeded without materializing it (skipped: an upstream check or asset failed)"
    return LastRun(run.run_id, "failed", at, error, asset=key.to_user_string(), error_run_id=error_run_id)


def _root_cause(instance: DagsterInstance, run: DagsterRun, step_key: str | None) -> tuple[str | None, str]:
    """The first line of the run's failure and the run it is from: through retries that were interrupted, the
    failure of the run they retried (the cause), else the run's own."""
    own = _failure(instance, run, step_key)
    current, seen = run, {run.run_id}
    while own.interrupted:  # each run is visited once: a cycle of parents ends the walk
        parent_id = current.parent_run_id or current.tags.get(PARENT_RUN_TAG)
        parent = instance.get_run_by_id(parent_id) if parent_id and parent_id not in seen else None
        if parent is None:
            break
        seen.add(parent.run_id)
        earlier = _failure(instance, parent, step_key)
        if earlier.line is not None and not earlier.interrupted:
            return earlier.line, parent.run_id
        current = parent
    return own.line, run.run_id


def _failure(instance: DagsterInstance, run: DagsterRun, step_key: str | None) -> _Failure:
    """The failure of `step_key` in the run, else of any step, else of the run."""
    failures = instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE})
    steps = [e for e in failures if e.dagster_event and e.dagster_event.event_type == DagsterEventType.STEP_FAILURE]
    ours = [e for e in steps if e.dagster_event and e.dagster_event.step_key == step_key]
    for entry in ours or steps:
        data = entry.dagster_event.step_failure_data if entry.dagster_event else None
        if data is not None and data.error is not None:
            error = _root(data.error)
            return _Failure(_first_line(error.message), error.cls_name in _INTERRUPTIONS)
    canceled = run.status == DagsterRunStatus.CANCELED
    for entry in failures:  # no step failed: the run's own failure (an interrupt between steps lands here)
        event = entry.dagster_event
        if event is not None and event.message:
            run_error = getattr(event.event_specific_data, "error", None)
            interrupted = canceled or (run_error is not None and _root(run_error).cls_name in _INTERRUPTIONS)
            return _Failure(_first_line(event.message), interrupted)
    return _Failure("the run was canceled" if canceled else None, canceled)


def _root(error: SerializableErrorInfo) -> SerializableErrorInfo:
    """What happened, under Dagster's wrappers ("Error occurred while executing op ...")."""
    while error.cause is not None:
        error = error.cause
    return error


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]
