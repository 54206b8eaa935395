"""The fetches started ahead hold the client's lines until the run's step adopts them (pipeline/raw/prefetch.py
HeldLogs); the step then says them. The console must show every line once and in the order it was said, also when
the fetch threads go on saying lines while the held ones are being said."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from pipeline.raw.prefetch import HELD_RECORDS, SOURCE_LOGGER, HeldLogs


class SlowSink:
    """A step's log whose every line takes a while to say (Dagster writes an event per line); records the order."""

    def __init__(self, each_s: float, on_first: threading.Event | None = None) -> None:
        self.lines: list[str] = []
        self.each_s = each_s
        self.on_first = on_first

    def _say(self, message: str, **_: Any) -> None:
        self.lines.append(message)
        if self.on_first is not None:
            self.on_first.set()
        time.sleep(self.each_s)

    info = warning = _say


class Collecting(logging.Handler):
    def __init__(self, into: SlowSink) -> None:
        super().__init__()
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.lines.append(record.getMessage())


def _in_thread(fn: Any) -> None:
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join()


def test_lines_said_while_the_held_ones_are_replayed_come_after_them_in_order() -> None:
    source = logging.getLogger(SOURCE_LOGGER)
    held = HeldLogs()
    replaying = threading.Event()
    sink = SlowSink(each_s=0.02, on_first=replaying)
    handler = Collecting(sink)
    source.addHandler(handler)
    source.addFilter(held)
    source.setLevel(logging.INFO)
    try:
        _in_thread(lambda: [source.info(f"attempt {n}") for n in range(1, 6)])
        assert sink.lines == []  # held, not said

        def later_attempts() -> None:
            replaying.wait(5)
            for n in range(6, 9):
                source.info(f"attempt {n}")

        fetching = threading.Thread(target=later_attempts)
        fetching.start()
        held.release(sink)
        fetching.join()
        _in_thread(lambda: source.info("attempt 9"))  # released: passes straight to the handlers
    finally:
        source.removeHandler(handler)
        source.removeFilter(held)
    assert sink.lines == [f"attempt {n}" for n in range(1, 10)]


def test_lines_beyond_the_held_limit_are_counted_once_and_the_newest_said() -> None:
    source = logging.getLogger(SOURCE_LOGGER)
    held = HeldLogs()
    source.addFilter(held)
    source.setLevel(logging.INFO)
    try:
        _in_thread(lambda: [source.info(f"line {n}") for n in range(HELD_RECORDS + 3)])
    finally:
        source.removeFilter(held)
    sink = SlowSink(each_s=0)
    held.release(sink)
    held.release(sink)  # once only
    assert sink.lines[0] == "3 earlier line(s) of the fetches started ahead not shown"
    assert sink.lines[1:] == [f"line {n}" for n in range(3, HELD_RECORDS + 3)]
