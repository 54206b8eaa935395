"""The order of a run's steps: among the steps ready to run, those whose data has arrived go first.

Dagster's in-process executor picks, among the steps whose dependencies are met, the highest
`dagster/priority`. But a sync step whose background fetch (pipeline/prefetch) is still running would only
wait for the network, holding up every step behind it: in a no-change sync `sync_groups` waited for the users
of every group while the lesson sessions, the lessons, their check and the answers, all fetched already,
queued behind it. So a step still waiting for its fetch sorts after every step that can work now; the
priorities order each of the two groups. The order is taken anew before every step (Dagster sorts the ready
steps each time it picks one), so a fetch ending moves its step up at once. Measured (scale medium, 40 ms a
request, no-change sync of the raw tables, median of 3): 5.10 -> 4.12 s. Nothing else changes: dependencies,
pools, retries and the steps' own work are Dagster's and the steps'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.plan.step import ExecutionStep
from dagster._core.execution.retries import RetryMode
from dagster._core.storage.tags import PRIORITY_TAG

from pipeline.prefetch.plan import awaited_stream
from pipeline.prefetch.runs import fetch_running

# Added to the sort key of a step still waiting for its fetch: above any priority a step carries.
WAITING = 1_000


def step_order(run_id: str, step: ExecutionStep) -> float:
    """Dagster's sort key (lower first): the negated priority, behind every ready step while its fetch runs."""
    waiting = fetch_running(run_id, awaited_stream(step.key))
    return (WAITING if waiting else 0) - int(step.tags.get(PRIORITY_TAG, 0))


class ReadyFirstPlan(ExecutionPlan):
    """The run's execution plan, started with `step_order` as its sort key (ExecutionPlan.start takes one, and
    Dagster's inner_plan_execution_iterator starts the plan it is given without one)."""

    run_id: str  # set by ready_first: a NamedTuple subclass without __slots__ takes attributes

    def start(self, retry_mode: RetryMode, sort_key_fn: Callable[[ExecutionStep], float] | None = None,
              *args: Any, **kwargs: Any) -> ActiveExecution:
        run_id = self.run_id
        return super().start(retry_mode, sort_key_fn or (lambda step: step_order(run_id, step)), *args, **kwargs)


def ready_first(plan: ExecutionPlan, run_id: str) -> ExecutionPlan:
    """`plan`, whose steps run ready ones first (module docstring)."""
    ordered = ReadyFirstPlan(*plan)
    ordered.run_id = run_id
    return ordered
