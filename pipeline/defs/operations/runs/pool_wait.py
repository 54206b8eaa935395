"""Before an in-process run (`lessonsync sync`, the demo, tests): wait until the `warehouse` pool has a free slot,
saying who holds it, and give up after LESSONSYNC_POOL_WAIT_TIMEOUT with a message that names the holder.

Dagster 1.13's in-process executor waits for a pool slot in a loop that never sleeps (its
`InstanceConcurrencyContext.interval_to_next_pending_claim_check` returns min(0, ...)), logs one DEBUG event every
5 minutes and never gives up: so an in-process run starts only once the pool is free (README, known issues).
Runs the daemon launches wait in its queue instead (the writer tag's run limit, dagster.yaml)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from dagster import DagsterInstance

from pipeline.defs.operations.runs.identity import recorded_process, this_host

REPORT_EVERY_SECONDS = 30.0
POLL_SECONDS = 0.5


class PoolWaitTimeout(Exception):
    """A run waited longer than LESSONSYNC_POOL_WAIT_TIMEOUT for a pool slot."""


def wait_for_pool(
    instance: DagsterInstance,
    pool: str,
    *,
    timeout: float,
    report: Callable[[str], None],
    report_every: float = REPORT_EVERY_SECONDS,
) -> float:
    """Return once `pool` has a free slot (or has no limit), with the seconds waited (0.0: it was free at once);
    `report(message)` every `report_every` seconds while it waits; PoolWaitTimeout after `timeout` seconds."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return 0.0
    started = time.monotonic()
    last_report = None
    while True:
        info = storage.get_concurrency_info(pool)
        waited = time.monotonic() - started
        if len(info.claimed_slots) < info.slot_count or (info.slot_count == 0 and not info.claimed_slots):
            if last_report is not None:
                report(f"a slot of pool '{pool}' is free now")
            return waited if last_report is not None else 0.0
        if waited >= timeout:
            raise PoolWaitTimeout(
                f"waited {waited:.0f} s (LESSONSYNC_POOL_WAIT_TIMEOUT) for a slot of pool '{pool}', "
                f"{describe_holders(instance, pool)}. If that run is still working, let it finish and run again (or "
                "raise LESSONSYNC_POOL_WAIT_TIMEOUT); if its process is gone, `lessonsync recover` fails it and frees "
                "its slot (`--run RUN_ID` for a run on another host)."
            )
        if last_report is None or time.monotonic() - last_report >= report_every:
            last_report = time.monotonic()
            report(
                f"waited {waited:.0f} s for a slot of pool '{pool}', {describe_holders(instance, pool)}; giving up "
                f"after {timeout:.0f} s"
            )
        time.sleep(POLL_SECONDS)


def describe_holders(instance: DagsterInstance, pool: str) -> str:
    info = instance.event_log_storage.get_concurrency_info(pool)
    claimed = {(slot.run_id, slot.step_key) for slot in info.claimed_slots}
    if not claimed:
        return f"all {info.slot_count} slot(s) were just taken"
    since = {(p.run_id, p.step_key): p.assigned_timestamp for p in info.pending_steps}
    return "held by " + "; ".join(
        _describe_holder(instance, run_id, step, since.get((run_id, step))) for run_id, step in sorted(claimed)
    )


def _describe_holder(instance: DagsterInstance, run_id: str, step_key: str, since: datetime | None) -> str:
    run = instance.get_run_by_id(run_id)
    text = f"run {run_id} step {step_key}" + (f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since else "")
    if run is None:
        return text + " (a run no longer in this instance)"
    process = recorded_process(run.run_id, run.tags)
    where = "its process unknown"
    if process is not None:
        alive = "alive" if process.host != this_host() or process.is_alive() else "GONE"
        where = f"pid {process.pid} on {process.host}" + ("" if process.host != this_host() else f", {alive}")
    return f"{text} ({run.job_name}, {run.status.value}, {where})"
