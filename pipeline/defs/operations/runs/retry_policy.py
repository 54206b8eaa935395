"""Which failed runs the daemon re-launches: only those that can pass on retry.

The instance (pipeline/instance/dagster.yaml) retries no run by default (max_retries 0). A step that fails on a
transient cause tags its run with Dagster's public run-retry tags (`dagster/max_retries`,
`dagster/retry_on_asset_or_op_failure`), so the daemon re-launches it from the failed steps, at most
TRANSIENT_RETRIES times. Transient: the platform unavailable for a whole retry budget (PlatformUnavailableError),
the warehouse file held by another process past LESSONSYNC_DUCKDB_LOCK_TIMEOUT (WarehouseLockedError). Anything
else (out of memory, bad settings, a contract break, a 4xx, a crashed worker) fails the same way again, so a run
with any such failed step is not retried. Runs of `lessonsync sync` (in-process) are never tagged: cron retries
those."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dagster import DagsterEvent, DagsterInstance

TRANSIENT_ERRORS = frozenset({"PlatformUnavailableError", "WarehouseLockedError"})
TRANSIENT_RETRIES = 2
IN_PROCESS_TAG = "lessonsync/in-process"  # set on runs of execute_in_process (inprocess.py): never re-launched
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"


def error_classes(error: object) -> list[str]:
    """Class names of a SerializableErrorInfo and of its causes and contexts."""
    names, seen, pending = [], set(), [error]
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        names.append(getattr(item, "cls_name", None) or "")
        pending += [getattr(item, "cause", None), getattr(item, "context", None)]
    return names


def is_transient(error: object) -> bool:
    return any(name in TRANSIENT_ERRORS for name in error_classes(error))


def retry_tags(retryable: bool) -> dict[str, str]:
    if retryable:
        return {MAX_RETRIES_TAG: str(TRANSIENT_RETRIES), RETRY_ON_STEP_FAILURE_TAG: "true"}
    return {MAX_RETRIES_TAG: "0", RETRY_ON_STEP_FAILURE_TAG: "false"}


def tag_retryable_failures(
    events: Iterable[DagsterEvent], instance: DagsterInstance, run_id: str, run_tags: dict[str, str]
) -> Iterator[DagsterEvent]:
    """`events`, passed on; the run tagged retryable while every failed step failed on a transient cause."""
    if run_tags.get(IN_PROCESS_TAG) == "true":
        yield from events
        return
    tagged: bool | None = None  # None: no step failed yet
    for event in events:
        if event.is_step_failure:
            error = getattr(event.event_specific_data, "error", None)
            retryable = is_transient(error) and tagged is not False
            if retryable != tagged:
                instance.add_run_tags(run_id, retry_tags(retryable))
                tagged = retryable
        yield event
