"""WAL checkpoints of the inbox from their own thread and connection.

Left to SQLite, the commit that crosses the autocheckpoint threshold also copies the WAL into the
database file and fsyncs it, stalling every request waiting on that commit. Here the writer never checkpoints; this thread does, in PASSIVE mode, which never blocks it."""

from __future__ import annotations

import logging
import threading

from pipeline.webhooks.inbox_backend import InboxBackend

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, inbox: InboxBackend, interval_seconds: float = 0.5) -> None:
        self._inbox = inbox
        self._interval = interval_seconds
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

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
        self._checkpoint("TRUNCATE")  # leave a small WAL behind on a clean shutdown

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            self._checkpoint("PASSIVE")

    def _checkpoint(self, mode: str) -> None:
        try:
            self._inbox.checkpoint(mode)
        except Exception:  # noqa: BLE001 - a missed checkpoint only lets the WAL grow until the next one
            log.warning("inbox WAL checkpoint (%s) failed; will retry", mode, exc_info=True)
