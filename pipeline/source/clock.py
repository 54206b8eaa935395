"""The platform's clock as its Date headers show it."""

from __future__ import annotations

import time
from datetime import datetime, timedelta


class ClockMark:
    """Server time at a local instant, learnt from the first Date header that arrives after it.

    Never extrapolated forward from an older Date: the platform's clock may be simulated or stopped. It is
    one bound of the cursor rule (pipeline/windows.py), never trusted alone: nothing ties the Date header
    to the clock that stamps lastDate. The Date header has whole seconds, hence -1 s.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._date: datetime | None = None
        self._received = 0.0

    def note(self, server_now: datetime, received: float) -> None:
        if self._date is None:
            self._date, self._received = server_now, received

    def server_start(self) -> datetime | None:
        if self._date is None:
            return None
        return self._date - timedelta(seconds=self._received - self.started + 1.0)
