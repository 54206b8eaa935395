"""Which failed runs are launched again, and when: only those that can pass on retry.

The instance (pipeline/instance/dagster.yaml) retries no run by default (max_retries 0). A failed step tags its run
(`retry_policy_hook`, on every job of the code location) with what its failure allows, the worst of every failed
step's (the tag `lessonsync/retry`):
- `after-backoff`: the platform was unavailable for a whole retry budget (PlatformUnavailableError). Retrying at
  once would meet the same outage, so the daemon does not (`dagster/max_retries=0`): `retry_sensor.py` launches the
  run again once it has been over for a back-off (Dagster 1.13's run retries have no delay), at most
  TRANSIENT_RETRIES times, the pool and the writer's run slot free meanwhile.
- `at-once`: the warehouse file was held by another process past LESSONSYNC_DUCKDB_LOCK_TIMEOUT (WarehouseLockedError),
  a wait already made: Dagster's public run-retry tags (`dagster/max_retries`, `dagster/retry_on_asset_or_op_failure`)
  have the daemon re-launch it from the failed steps at once, at most TRANSIENT_RETRIES times.
- `never`: anything else (out of memory, bad settings, a contract break, a 4xx, a crashed worker) fails the same way
  again; nor is a run whose back-off retries are used up.
Runs of `lessonsync sync` (in-process) are never tagged: cron retries those."""

from __future__ import annotations

from dagster import HookContext, failure_hook

TRANSIENT_RETRIES = 2
IN_PROCESS_TAG = "lessonsync/in-process"  # set on the runs of `lessonsync sync` (pipeline/sync.py): never re-launched
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
RETRY_TAG = "lessonsync/retry"  # what the run's failures allow: NEVER, AT_ONCE, AFTER_BACKOFF (then REQUESTED)
RETRY_NUMBER_TAG = "lessonsync/retry-number"  # on a run launched after a back-off: 1, 2
RETRY_OF_TAG = "lessonsync/retry-of"  # on a run launched after a back-off: the first run's id

NEVER, AT_ONCE, AFTER_BACKOFF = "never", "at-once", "after-backoff"
REQUESTED = "requested"  # AFTER_BACKOFF once retry_sensor.py has asked for the run again
# Which failure allows what (class names of the exception and its causes); a run takes the worst of its steps'.
AFTER_BACKOFF_ERRORS = frozenset({"PlatformUnavailableError", "PlatformUnreachableError"})
AT_ONCE_ERRORS = frozenset({"WarehouseLockedError"})
_WORST_LAST = (AT_ONCE, AFTER_BACKOFF, NEVER)


def retry_tags(decision: str) -> dict[str, str]:
    """The run tags that carry out `decision` (Dagster's daemon retries only AT_ONCE runs)."""
    at_once = decision == AT_ONCE
    return {
        RETRY_TAG: decision,
        MAX_RETRIES_TAG: str(TRANSIENT_RETRIES) if at_once else "0",
        RETRY_ON_STEP_FAILURE_TAG: str(at_once).lower(),
    }


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


def retry_decision(error: BaseException | None, tags: dict[str, str]) -> str:
    """What a step failing on `error` allows its run (tagged `tags`), combined with what its other steps allowed."""
    names = set(exception_classes(error))
    step = AFTER_BACKOFF if names & AFTER_BACKOFF_ERRORS else AT_ONCE if names & AT_ONCE_ERRORS else NEVER
    if step == AFTER_BACKOFF and int(tags.get(RETRY_NUMBER_TAG, "0")) >= TRANSIENT_RETRIES:
        step = NEVER  # its retries are used up
    before = tags.get(RETRY_TAG)
    return max(step, before, key=_WORST_LAST.index) if before in _WORST_LAST else step


@failure_hook(name="lessonsync_retry_policy")
def retry_policy_hook(context: HookContext) -> None:
    """A failed step tags its run with what the failures of its steps so far allow (the module docstring)."""
    instance = context.instance
    run = instance.get_run_by_id(context.run_id)
    if run is None or run.tags.get(IN_PROCESS_TAG) == "true":
        return  # never re-launched
    instance.add_run_tags(context.run_id, retry_tags(retry_decision(context.op_exception, dict(run.tags))))
