"""A live progress display on an interactive terminal: one line per stream of the run with its pages, rows and rate,
a bar and an ETA where the work is known (the answers' planned requests), and what a waiting stream waits for. It is drawn with rich on stderr; the log lines of the run print above it (the console writes through the
display's stderr), and the progress lines it shows are left out of them. Off the terminal (cron, CI, a pipe) or
with LESSONSYNC_LOG_FORMAT=json nothing is drawn: the runner's progress lines say the same, a few at a time."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from types import TracebackType

from rich.console import Console as RichConsole
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.text import Text

from pipeline.logs import console
from pipeline.source import StreamProgress, duration_text, listen_to_progress

PROGRESS_EVENTS = {"progress", "waiting", "fetched"}  # log lines of a stream's progress, shown by the display
STATES = {"fetched": "fetched, committing", "committed": "committed", "failed": "FAILED", "stopped": "stopped"}


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
        # The terminal itself, not the process's stderr: Dagster captures a step's output (fd 2 becomes a pipe it
        # copies to the terminal), and rich writes no cursor movement to what is not a terminal.
        self._terminal = os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8", errors="replace")
        self._progress = Progress(
            TextColumn("{task.description:<16}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[status]}"),
            console=RichConsole(file=self._terminal),
            refresh_per_second=4,
            redirect_stdout=True,
            redirect_stderr=True,  # what else writes to stderr meanwhile prints above the display too
        )
        self._tasks: dict[str, TaskID] = {}
        self._latest: dict[str, StreamProgress] = {}
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
        self._terminal.close()

    def print_line(self, line: str) -> None:
        """A log line above the display, as it is (no markup, no wrapping of our own: the terminal wraps it)."""
        self._progress.console.print(Text(line), soft_wrap=True)

    def update(self, progress: StreamProgress) -> None:
        """A stream's new figures (from the client) or state (from the runner): its line shows the latest of each."""
        known = self._latest.get(progress.stream)
        if progress.pages is None and known is not None:  # a change of state: the figures stay the client's
            progress = replace(known, state=progress.state, note=progress.note)
        self._latest[progress.stream] = progress
        task = self._tasks.get(progress.stream)
        if task is None:
            task = self._tasks[progress.stream] = self._progress.add_task(
                progress.stream, total=None, counts="", status=""
            )
        if progress.state in ("fetched", "committed"):
            total, completed = 1.0, 1.0
        elif progress.planned:
            total, completed = float(progress.planned), float(min(progress.done, progress.planned))
        else:
            total, completed = None, 0.0  # pages still to come unknown: the bar pulses
        self._progress.update(
            task,
            total=total,
            completed=completed,
            counts=f"{progress.pages or 0:>7,} pages {progress.rows or 0:>11,} rows {progress.rate:>9,.0f} rows/s",
            status=status_text(progress),
        )


def status_text(progress: StreamProgress) -> str:
    """What the stream is doing: its state, what it waits for, or how long its planned requests still take."""
    if progress.state in STATES:
        return STATES[progress.state]
    if progress.state == "waiting":
        return f"waiting for {progress.note}"
    if progress.planned and 0 < progress.done < progress.planned:
        seconds = (progress.planned - progress.done) * progress.elapsed_s / progress.done
        return f"{progress.done:,}/{progress.planned:,} requests, ETA {duration_text(seconds)}"
    if progress.planned:
        return f"{progress.done:,}/{progress.planned:,} requests"
    return ""
