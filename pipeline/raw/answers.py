"""The answers' plan: the window's active lessons as the warehouse knows them right after the active-lessons
sweep (committed, or still in that load's lake parts: pipeline/raw/answer_versions.py), spilled to a file, and
the cursor the answers may not pass.

- the answers' window, modes and recorded versions are those of answer_versions.py, whenever they are planned;
- their cursor ceiling is the active-lessons cursor of exactly the lessons the plan saw: the one the sweep's load
  committed, or the stored one when the run does not sweep them (pipeline/raw/windows.py);
- nothing of the answers commits before the active lessons did (the runner commits in that order), and the
  versions are written only by the answers' commit."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from pipeline.raw.answer_versions import WindowLessons, spill_window_active_lessons
from pipeline.raw.windows import Window
from pipeline.settings import Settings
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

    def close(self) -> None:
        """Remove the spilled window (after the answers' commit, or when their fetch is cancelled)."""
        self.spill.close()


def refetch_whole_window(window: Window, settings: Settings) -> bool:
    """Whether every active lesson of the window needs its answers again (answer_versions.py: modes)."""
    return window.since is None or window.label != "incremental" or settings.answers_refetch == "window"


def plan_answers(
    warehouse: Warehouse, window: Window, settings: Settings, *, loading: Load | None, ceiling: datetime | None
) -> AnswersPlan:
    """The plan of `window`, from the committed active lessons and, when given, the sweep's uncommitted load."""
    spill = ExitStack()
    lessons = spill.enter_context(
        spill_window_active_lessons(
            warehouse, window, only_changed=not refetch_whole_window(window, settings), loading=loading
        )
    )
    return AnswersPlan(window, lessons, ceiling, spill)
