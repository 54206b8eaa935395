"""A live progress display on an interactive terminal: one line per stream of the run with its pages, rows and rate,
a bar and an ETA where the pages to fetch are known (the answers' planned requests), and what a waiting stream
waits for. It is drawn with rich on stderr; the log lines of the run print above it (the console writes through the
display's stderr), and the progress lines it shows are left out of them. Off the terminal (cron, CI, a pipe) or
with LESSONSYNC_LOG_FORMAT=json nothing is drawn: the runner's progress lines say the same, a few at a time."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

from rich.console import Console as RichConsole
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.text import Text

from pipeline.logs import console
from pipeline.source.stats import StreamProgress, listen_to_progress
from pipeline.source.transport import duration_text

PROGRESS_EVENTS = {"progress", "waiting", "fetched"}  # log lines of a stream's progress, shown by the display
STATES = {"fetched": "fetched, committing", "committed": "committed", "failed": "FAILED"}


def live_progress() -> AbstractContextManager[object]:
    """The display while the block runs, on an interactive terminal with text logs; else nothing."""
    if console().log_format != "text" or not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        return nullcontext()
    return LiveProgress()


def is_progress_line(record: logging.LogRecord) -> bool:
    return getattr(record, "event", None) in PROGRESS_EVENTS and hasattr(record, "stream")


class LiveProgress:
    """One rich Progress task per stream, updated by the progress listeners (from the fetching threads)."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[status]}"),
            console=RichConsole(file=sys.stderr),
            refresh_per_second=4,
            redirect_stdout=True,
            redirect_stderr=True,  # what else writes to stderr meanwhile prints above the display too
        )
        self._tasks: dict[str, TaskID] = {}
        self._stop_listening: Callable[[], None] = lambda: None

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        self._stop_listening = listen_to_progress(self.update)
        console().hide, console().sink = is_progress_line, self.print_line
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop_listening()
        console().hide = console().sink = None
        self._progress.stop()  # the last state of every stream stays on the terminal

    def print_line(self, line: str) -> None:
        """A log line above the display, as it is (no markup, no wrapping of our own: the terminal wraps it)."""
        self._progress.console.print(Text(line), soft_wrap=True)

    def update(self, progress: StreamProgress) -> None:
        task = self._tasks.get(progress.stream)
        if task is None:
            task = self._tasks[progress.stream] = self._progress.add_task(
                progress.stream, total=None, counts="", status=""
            )
        finished = progress.state in ("fetched", "committed")
        total = progress.pages if finished else progress.total_pages
        self._progress.update(
            task,
            total=max(total, progress.pages) if total is not None else None,
            completed=progress.pages,
            counts=f"{progress.pages:>7,} pages {progress.rows:>11,} rows {progress.rate:>9,.0f} rows/s",
            status=status_text(progress),
        )


def status_text(progress: StreamProgress) -> str:
    """What the stream is doing: its state, what it waits for, or the time its planned pages still take."""
    if progress.state in STATES:
        return STATES[progress.state]
    if progress.state == "waiting":
        return f"waiting for {progress.note}"
    if progress.total_pages and progress.pages and progress.pages < progress.total_pages:
        seconds = (progress.total_pages - progress.pages) * progress.elapsed_s / progress.pages
        return f"{progress.pages:,}/{progress.total_pages:,} pages, ETA {duration_text(seconds)}"
    return ""
