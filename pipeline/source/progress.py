"""Progress of long streams on logger "lessonsync.source": pages, rows and rate, every N pages or seconds."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("lessonsync.source")


class Progress:
    def __init__(self, stream: str, *, every_pages: int = 100, every_seconds: float = 10.0) -> None:
        self._stream = stream
        self._every_pages, self._every_seconds = every_pages, every_seconds
        self._started = self._last_report = time.monotonic()
        self.pages = self.rows = 0

    def page(self, rows: int) -> None:
        self.pages += 1
        self.rows += rows
        now = time.monotonic()
        if self.pages % self._every_pages == 0 or now - self._last_report >= self._every_seconds:
            self._last_report = now
            self.report("progress")

    def report(self, what: str) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        log.info("%s %s: %d pages, %d records, %.0f records/s, %.1f pages/s", self._stream, what, self.pages,
                 self.rows, self.rows / elapsed, self.pages / elapsed)
