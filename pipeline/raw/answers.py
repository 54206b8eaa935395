"""The answers' plan: the window's active lessons as the warehouse knows them right after the active-lessons
sweep (committed, or still in that load's lake parts: pipeline/raw/answer_versions.py), spilled to a file, and
the cursor the answers may not pass.

- the answers' window, modes and recorded versions are those of answer_versions.py, whenever they are planned;
- their cursor ceiling is the active-lessons cursor of exactly the lessons the plan saw: the one the sweep's load
  committed, or the stored one when the run does not sweep them (pipeline/raw/windows.py);
- nothing of the answers commits before the active lessons did (the runner commits in that order), and the
  versions are written only by the answers' commit.

`plan_answers` is the planner the answers' declaration names (`Planned(planner="answers")`, pipeline/raw/planners.py);
its `AnswersPlan` is what the runner asks of any plan (planners.py `Plan`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from pipeline.raw.answer_versions import VERSIONS, WindowLessons, spill_window_active_lessons
from pipeline.raw.commit import StreamLoad
from pipeline.raw.windows import Window
from pipeline.settings import SyncSettings
from pipeline.source import Batch, PlatformClient, RunStats
from pipeline.warehouse import Load, Warehouse


@dataclass
class AnswersPlan:
    window: Window
    lessons: WindowLessons  # spilled to a file, removed when `spill` closes
    ceiling: datetime | None  # set once the active lessons the plan saw have committed
    spill: ExitStack = field(default_factory=ExitStack)

    @cached_property
    def counts(self) -> tuple[int, int]:
        """Active lessons in the window, and those whose answers are asked for."""
        return self.lessons.counts()

    @property
    def parent_rows(self) -> int:
        """The active lessons the plan was made from (a larger window is not inserted while fetched)."""
        return self.counts[0]

    def fetch(self, client: PlatformClient) -> tuple[Iterator[Batch], str]:
        """The planned requests' batches (lazy: nothing is asked before the first one is read), and what they were
        planned from, for the log."""
        planner_input = self.lessons.planner_input()
        batches = client.iter_answers(planner_input, updated_since=self.window.since)
        return batches, f"planned from the {planner_input.num_rows:,} active lessons of their window"

    def before_commit(self, load: Load, stats: RunStats) -> None:
        """The versions of the active lessons whose answers were fetched, written into the answers' load. Only a
        complete run holds the answers of every planned active lesson: an incomplete one records nothing, so the
        next run asks for them again."""
        if stats.complete:
            for versions in self.lessons.fetched_versions():
                load.write(VERSIONS, versions)

    def committed(self, done: StreamLoad) -> tuple[str, dict[str, object]]:
        """What the commit says of the plan: a log line, and the metadata it adds to the stream's."""
        in_window, refetched = self.counts
        said = (
            f"answers: {refetched:,} of the window's {in_window:,} active lessons needed their answers; "
            f"{done.stats.planned_requests:,} requests planned"
        )
        return said, {
            "planned_requests": done.stats.planned_requests,
            "window_active_lessons": in_window,
            "refetched_active_lessons": refetched,
        }

    def close(self) -> None:
        """Remove the spilled window (after the answers' commit, or when their fetch is cancelled)."""
        self.spill.close()


def refetch_whole_window(window: Window, settings: SyncSettings) -> bool:
    """Whether every active lesson of the window needs its answers again (answer_versions.py: modes)."""
    return window.since is None or window.label != "incremental" or settings.answers_refetch == "window"


def plan_answers(
    warehouse: Warehouse, window: Window, settings: SyncSettings, *, loading: Load | None, ceiling: datetime | None
) -> AnswersPlan:
    """The plan of `window`, from the committed active lessons and, when given, the sweep's uncommitted load."""
    spill = ExitStack()
    lessons = spill.enter_context(
        spill_window_active_lessons(
            warehouse, window, only_changed=not refetch_whole_window(window, settings), loading=loading
        )
    )
    return AnswersPlan(window, lessons, ceiling, spill)
