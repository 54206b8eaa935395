"""The answers fetched while the active lessons commit.

The answers are planned from the active lessons of the sweep (answer_versions.py). Those are known the moment
the active-lessons listing is complete, in the load's lake parts, before the load commits: so when the run
also executes the answers step, the active-lessons step plans the answers then, from the committed active
lessons and its uncommitted load together (spill_window_active_lessons(loading=...)), and starts fetching them in
the background (pipeline/prefetch) before it commits. The answers step takes that fetch and commits it.

What still holds:
- the answers' window, modes and recorded versions are the answers step's (answer_versions.py): same cursor,
  same backfill range, same plan, only earlier;
- their cursor ceiling is the active-lessons cursor that this load committed (`ceiling`, set after the
  commit), i.e. the cursor of exactly the active lessons the plan saw (pipeline/defs/windows.py);
- nothing of the answers commits before the active lessons did: the answers step depends on the
  active-lessons step, and a run that fails before the answers step cancels the fetch and discards its parts
  (prefetch/runs.py, close_run); the versions are written only by the answers commit.

Until the answers step, their pages are decoded on the client's own thread (`hold_decode_workers`): the commits
of the steps in between run beside this fetch, and a decode worker process on top of them made the large full
sync's peak (process tree 597-605 MiB; ~555 without it). The answers step lifts the hold.

A sweep of more than OVERLAP_MAX_ROWS active lessons (a full sync at scale large: 1M) is planned and fetched
right AFTER its commit instead, still before the answers step: that commit sorts and stages up to millions of
rows within DuckDB's memory limit, and the answers' fetch buffers and decode worker would add up with it (scale
large: 876 MiB of the process tree at that overlap, the sync's peak; the answers then start ~4 s later in a
150 s sync). The plan is the same: the committed table then holds what the load's parts held.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime

from dagster import AssetExecutionContext

from pipeline.defs.loading import window_for
from pipeline.defs.progress.answer_versions import VERSIONS, WindowLessons, spill_window_active_lessons
from pipeline.defs.windows import Window
from pipeline.prefetch.background import BackgroundFetch
from pipeline.prefetch.plan import ANSWERS_STEP
from pipeline.prefetch.runs import add_prefetched, peek_prefetched, take_prefetched
from pipeline.source.client import PlatformClient
from pipeline.source.stats import RunStats
from pipeline.warehouse import Load, Warehouse, early_insert

OVERLAP_MAX_ROWS = 500_000  # a larger active-lessons load commits before the answers start fetching (docstring)


@dataclass
class AnswersPlan:
    """The answers' plan made by the active-lessons step, handed to the answers step with its fetch."""

    window: Window
    lessons: WindowLessons  # spilled to a file (answer_versions.py), removed when `spill` closes
    spill: ExitStack = field(default_factory=ExitStack)  # closed by the answers step once it has committed
    ceiling: datetime | None = None  # the active-lessons cursor committed with the planned lessons
    ceiling_known: bool = False

    def close(self) -> None:
        """Remove the spilled window (the answers step closes it after its commit, a cancelled fetch at once)."""
        self.spill.close()


def refetch_whole_window(window: Window, client: PlatformClient) -> bool:
    """Whether every active lesson of the window needs its answers again (answer_versions.py: modes)."""
    return window.since is None or window.label != "incremental" or client.settings.answers_refetch == "window"


class AnswersAhead:
    """Started from the active-lessons step: `start` before its commit (load_stream's before_commit), then
    `committed` with the cursor the commit stored."""

    def __init__(
        self, context: AssetExecutionContext, warehouse: Warehouse, client: PlatformClient, backfill: Window | None
    ) -> None:
        self._context, self._warehouse, self._client = context, warehouse, client
        self._backfill = backfill  # the run's backfill range (its `backfill` resource), as the answers step reads it
        self._plan: AnswersPlan | None = None

    @staticmethod
    def wanted(context: AssetExecutionContext) -> bool:
        """Whether this run executes the answers step (else nothing is fetched ahead)."""
        return ANSWERS_STEP in context.get_step_execution_context().execution_plan.step_keys_to_execute

    def start(self, load: Load, stats: RunStats) -> None:
        """Before the active lessons commit: plan and start the answers from the uncommitted load, unless it is
        too large to overlap its commit (then `committed` does it)."""
        if stats.rows.get("active_lessons", 0) <= OVERLAP_MAX_ROWS:
            self._start(load)

    def committed(self, cursor_after: datetime | None) -> None:
        if self._plan is None:
            self._start(None)  # the load was too large to overlap its commit: the committed table holds it now
        if self._plan is not None:
            self._plan.ceiling, self._plan.ceiling_known = cursor_after, True

    def _start(self, load: Load | None) -> None:
        context, wh, client = self._context, self._warehouse, self._client
        wh.ensure_tables([VERSIONS])
        cursor_before = wh.cursor("answers")
        window = window_for(context, cursor_before, client.settings, self._backfill)
        spill = ExitStack()
        lessons = spill.enter_context(
            spill_window_active_lessons(wh, window, only_changed=not refetch_whole_window(window, client), loading=load)
        )
        self._plan = AnswersPlan(window, lessons, spill)
        planner_input = lessons.planner_input()
        # until the answers step: the commits before it run beside this fetch, and a decode worker on top of them
        # was the sync's peak (decode_workers.py)
        client.hold_decode_workers()
        add_prefetched(
            context.run.run_id,
            BackgroundFetch(
                wh,
                client,
                "answers",
                context.run.run_id,
                window,
                cursor_before,
                client.iter_answers(planner_input, updated_since=window.since),
                plan=self._plan,
                part_rows=early_insert.EARLY_PART_ROWS,
            ),
        )  # a first load goes in part by part while fetched (loading.py)
        context.log.info(
            f"answers: planned from the {planner_input.num_rows:,} active lessons of their window, "
            + (
                "fetching while the active lessons commit"
                if load is not None
                else "fetching from now, after the active lessons committed"
            )
        )


def take_answers_plan(context: AssetExecutionContext) -> AnswersPlan | None:
    """The plan of the answers fetched ahead in this run, once the active lessons it saw committed."""
    fetch = peek_prefetched(context.run.run_id, "answers")
    if fetch is None:
        return None
    plan = fetch.plan
    if not isinstance(plan, AnswersPlan) or not plan.ceiling_known:  # cannot happen after a committed step
        taken = take_prefetched(context.run.run_id, "answers")
        if taken is not None:
            taken.cancel()  # the answers step plans and fetches them itself
        return None
    return plan
