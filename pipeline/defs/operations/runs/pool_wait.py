"""A wait for a pool slot that sleeps, says who holds the slot, and gives up with a message.

Dagster 1.13's in-process executor waits for a pool slot in a loop that never sleeps
(`InstanceConcurrencyContext.interval_to_next_pending_claim_check` returns min(0, ...), never a positive
interval, so `ActiveExecution.sleep_til_ready` does not sleep): a blocked run burns a core, logs one DEBUG
engine event every 5 minutes and waits forever. This context is Dagster's own claim logic (the same storage
calls, priorities and backoff), plus a real sleep, a WARNING naming the holder every `report_every` seconds,
and a timeout that fails the run."""

from __future__ import annotations

import time
from datetime import datetime

from dagster import DagsterInstance
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.log_manager import DagsterLogManager
from dagster._core.storage.dagster_run import DagsterRun

from pipeline.defs.operations.runs.identity import recorded_process, this_host

REPORT_EVERY_SECONDS = 30.0
MAX_NAP_SECONDS = 1.0  # the loop wakes at least this often, so reports and the timeout stay on time


class PoolWaitTimeout(Exception):
    """A step waited longer than LESSONSYNC_POOL_WAIT_TIMEOUT for a pool slot."""


class WatchedConcurrencyContext(InstanceConcurrencyContext):
    def __init__(
        self,
        instance: DagsterInstance,
        dagster_run: DagsterRun,
        log: DagsterLogManager,
        *,
        timeout: float,
        report_every: float = REPORT_EVERY_SECONDS,
    ):
        super().__init__(instance, dagster_run)
        self._log = log
        self._timeout = timeout
        self._report_every = report_every
        self._blocked_since: dict[str, float] = {}  # step key -> monotonic time of its first blocked claim
        self._last_report: dict[str, float] = {}  # pool -> monotonic time of its last report

    def claim(self, concurrency_key: str, step_key: str, step_priority: int = 0) -> bool:
        if super().claim(concurrency_key, step_key, step_priority):
            if self._blocked_since.pop(step_key, None) is not None:
                self._log.info(f"step {step_key} got its slot of pool '{concurrency_key}'")
            return True
        now = time.monotonic()
        waited = now - self._blocked_since.setdefault(step_key, now)
        if waited >= self._timeout:
            raise PoolWaitTimeout(
                f"step {step_key} waited {waited:.0f} s (LESSONSYNC_POOL_WAIT_TIMEOUT) for a slot of pool "
                f"'{concurrency_key}', {self.describe_holders(concurrency_key)}. If that run is still working, let "
                "it finish and run again (or raise LESSONSYNC_POOL_WAIT_TIMEOUT); if its process is gone, "
                "`lessonsync recover` fails it and frees its slot (`--run RUN_ID` for a run on another host)."
            )
        if now - self._last_report.get(concurrency_key, -self._report_every) >= self._report_every:
            self._last_report[concurrency_key] = now
            self._log.warning(
                f"step {step_key} has waited {waited:.0f} s for a slot of pool '{concurrency_key}', "
                f"{self.describe_holders(concurrency_key)}; giving up after {self._timeout:.0f} s"
            )
        return False

    def interval_to_next_pending_claim_check(self) -> float:
        """Seconds until a pending claim is due again (Dagster's own backoff), at most MAX_NAP_SECONDS."""
        if not self.has_pending_claims():
            return 0.0
        due = min(self._pending_timeouts.values(), default=time.time())
        return min(max(0.0, due - time.time()), MAX_NAP_SECONDS)

    def describe_holders(self, pool: str) -> str:
        info = self._instance.event_log_storage.get_concurrency_info(pool)
        claimed = {(slot.run_id, slot.step_key) for slot in info.claimed_slots}
        if not claimed:
            return f"all {info.slot_count} slot(s) were just taken"
        since = {(p.run_id, p.step_key): p.assigned_timestamp for p in info.pending_steps}
        return "held by " + "; ".join(
            self._describe_holder(run_id, step, since.get((run_id, step))) for run_id, step in sorted(claimed)
        )

    def _describe_holder(self, run_id: str, step_key: str, since: datetime | None) -> str:
        run = self._instance.get_run_by_id(run_id)
        text = f"run {run_id} step {step_key}" + (f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since else "")
        if run is None:
            return text + " (a run no longer in this instance)"
        process = recorded_process(run.run_id, run.tags)
        where = "its process unknown"
        if process is not None:
            alive = "alive" if process.host != this_host() or process.is_alive() else "GONE"
            where = f"pid {process.pid} on {process.host}" + ("" if process.host != this_host() else f", {alive}")
        return f"{text} ({run.job_name}, {run.status.value}, {where})"
