"""WAL checkpoints of the inbox from their own thread and connection.

Left to SQLite, the commit that crosses the autocheckpoint threshold also copies the WAL into the
database file and fsyncs it, stalling every request waiting on that commit. Here the writer never checkpoints; this thread does, in PASSIVE mode, which never blocks it.

A checkpoint that fails (the inbox's directory gone, a disk error) is retried every interval. The first failure of a
streak is one WARNING line with the error, said again every REMIND_EVERY_S while it lasts, and its end one line:
a failure every half second must not flood the receiver's log."""

from __future__ import annotations

import logging
import threading
import time

from pipeline.webhooks.inbox_backend import InboxBackend

log = logging.getLogger(__name__)
REMIND_EVERY_S = 600.0


class Checkpointer:
    def __init__(self, inbox: InboxBackend, interval_seconds: float = 0.5) -> None:
        self._inbox = inbox
        self._interval = interval_seconds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing_since: float | None = None  # monotonic time of the streak's first failure
        self._said_at = 0.0  # monotonic time the streak was last logged

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="inbox-checkpoint", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self.checkpoint("TRUNCATE")  # leave a small WAL behind on a clean shutdown

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            self.checkpoint("PASSIVE")

    def checkpoint(self, mode: str) -> bool:
        """One checkpoint; False when it failed (logged as the module docstring says: a missed checkpoint only lets
        the WAL grow until the next one)."""
        try:
            self._inbox.checkpoint(mode)
        except Exception as error:  # noqa: BLE001 - see the docstring
            self._failed(mode, f"{type(error).__name__}: {error}")
            return False
        if self._failing_since is not None:
            log.warning(
                "inbox WAL checkpoint succeeds again, after %.0f s of failures", time.monotonic() - self._failing_since
            )
            self._failing_since = None
        return True

    def _failed(self, mode: str, error: str) -> None:
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = self._said_at = now
            log.warning(
                "inbox WAL checkpoint (%s) of %s failed (%s); retrying every %.1f s, said again every %.0f min "
                "while it fails",
                mode, self._inbox.location, error, self._interval, REMIND_EVERY_S / 60,
            )  # fmt: skip
        elif now - self._said_at >= REMIND_EVERY_S:
            self._said_at = now
            log.warning(
                "inbox WAL checkpoint (%s) of %s still failing after %.0f s (%s)",
                mode, self._inbox.location, now - self._failing_since, error,
            )  # fmt: skip
