"""Which failed runs the daemon re-launches: only those that can pass on retry.

The instance (pipeline/instance/dagster.yaml) retries no run by default (max_retries 0). A step that fails on a
transient cause tags its run (`retry_policy_hook`, on every job of the code location) with Dagster's public run-retry tags (`dagster/max_retries`,
`dagster/retry_on_asset_or_op_failure`), so the daemon re-launches it from the failed steps, at most
TRANSIENT_RETRIES times. Transient: the platform unavailable for a whole retry budget (PlatformUnavailableError),
the warehouse file held by another process past LESSONSYNC_DUCKDB_LOCK_TIMEOUT (WarehouseLockedError). Anything
else (out of memory, bad settings, a contract break, a 4xx, a crashed worker) fails the same way again, so a run
with any such failed step is not retried. Runs of `lessonsync sync` (in-process) are never tagged: cron retries
those."""

from __future__ import annotations

from dagster import HookContext, failure_hook

TRANSIENT_ERRORS = frozenset({"PlatformUnavailableError", "WarehouseLockedError"})
TRANSIENT_RETRIES = 2
IN_PROCESS_TAG = "lessonsync/in-process"  # set on the runs of `lessonsync sync` (pipeline/sync.py): never re-launched
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"


def retry_tags(retryable: bool) -> dict[str, str]:
    if retryable:
        return {MAX_RETRIES_TAG: str(TRANSIENT_RETRIES), RETRY_ON_STEP_FAILURE_TAG: "true"}
    return {MAX_RETRIES_TAG: "0", RETRY_ON_STEP_FAILURE_TAG: "false"}


def exception_classes(error: BaseException | None) -> list[str]:
    """Class names of an exception and of its causes and contexts."""
    names, seen = [], set()
    pending: list[BaseException | None] = [error]
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        names.append(type(item).__name__)
        pending += [item.__cause__, item.__context__]
    return names


@failure_hook(name="lessonsync_retry_policy")
def retry_policy_hook(context: HookContext) -> None:
    """A failed step tags its run retryable while every failed step of the run failed on a transient cause."""
    instance = context.instance
    run = instance.get_run_by_id(context.run_id)
    if run is None or run.tags.get(IN_PROCESS_TAG) == "true" or run.tags.get(MAX_RETRIES_TAG) == "0":
        return  # never re-launched, or a step already failed for good
    retryable = any(name in TRANSIENT_ERRORS for name in exception_classes(context.op_exception))
    instance.add_run_tags(context.run_id, retry_tags(retryable))
