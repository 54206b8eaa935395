"""Group commit: one writer thread turns whatever deliveries are waiting into one SQLite transaction.

SQLite writes block and each commit pays an fsync, so handlers never write themselves: they hand their
delivery to this thread and await a future, leaving the event loop free. While one transaction is being
fsynced the next requests queue up and share the following one, so the fsync cost is amortised under
load without adding any wait when the receiver is idle. A committed batch is handed back to the event
loop in one wake-up, not one per request."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from contextlib import suppress
from dataclasses import dataclass

from pipeline.webhooks.checkpoint import Checkpointer
from pipeline.webhooks.events import Delivery, Rejected
from pipeline.webhooks.inbox import AppendOutcome
from pipeline.webhooks.inbox_backend import InboxBackend, InboxWriterBackend

log = logging.getLogger(__name__)
Result = AppendOutcome | None | BaseException  # an exception means: not stored


@dataclass(frozen=True)
class _Job:
    item: Delivery | Rejected
    future: asyncio.Future[AppendOutcome | None]
    loop: asyncio.AbstractEventLoop


class GroupCommitter:
    """Owns the inbox writer connection and the thread that uses it."""

    def __init__(self, inbox: InboxBackend, max_batch: int = 512) -> None:
        self._inbox = inbox
        self._max_batch = max_batch
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._writer: InboxWriterBackend | None = None
        # Only SQLite's WAL needs checkpoints from outside the writer.
        self._checkpointer = Checkpointer(inbox) if inbox.wal_checkpoints else None
        self.transactions = 0  # commits made, for the benchmark's batching figure

    def start(self) -> None:
        """Open the inbox (creating it) in the caller, so a bad path fails at startup, not per request."""
        self._writer = self._inbox.open_writer(autocheckpoint=False)
        self._thread = threading.Thread(target=self._run, name="inbox-group-commit", daemon=True)
        self._thread.start()
        if self._checkpointer is not None:
            self._checkpointer.start()

    def stop(self) -> None:
        """Finish every queued job, then close the connection."""
        if self._thread is None:
            return
        self._jobs.put(None)
        self._thread.join()
        self._thread = None
        if self._checkpointer is not None:
            self._checkpointer.stop()

    async def store(self, item: Delivery | Rejected) -> AppendOutcome | None:
        """Durably stored when this returns: the outcome for a delivery, None for a quarantined body."""
        if self._thread is None:
            raise RuntimeError("the inbox writer is not running")
        loop = asyncio.get_running_loop()
        job = _Job(item, loop.create_future(), loop)
        self._jobs.put(job)
        return await job.future

    def _run(self) -> None:
        assert self._writer is not None
        try:
            while True:
                first = self._jobs.get()
                if first is None:
                    return
                batch = [first]
                stopping = self._drain_into(batch)
                self._hand_back(batch, self._commit(batch))
                if stopping:
                    return
        finally:
            self._writer.close()

    def _drain_into(self, batch: list[_Job]) -> bool:
        """Add waiting jobs up to the batch limit; True if the stop marker was met."""
        while len(batch) < self._max_batch:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                return True
            batch.append(job)
        return False

    def _commit(self, batch: list[_Job]) -> list[Result]:
        try:
            return self._write(batch)
        except Exception:  # noqa: BLE001 - one bad job must not fail the others: retry each alone
            log.warning("inbox group commit of %d failed; retrying one by one", len(batch), exc_info=True)
        results: list[Result] = []
        for job in batch:
            try:
                results.extend(self._write([job]))
            except Exception as exc:  # noqa: BLE001 - reported to that request as a 500
                results.append(exc)
        return results

    def _write(self, batch: list[_Job]) -> list[Result]:
        assert self._writer is not None
        deliveries = [job.item for job in batch if isinstance(job.item, Delivery)]
        rejected = [job.item for job in batch if isinstance(job.item, Rejected)]
        outcomes = iter(self._writer.write(deliveries, rejected))
        self.transactions += 1
        return [next(outcomes) if isinstance(job.item, Delivery) else None for job in batch]

    @staticmethod
    def _hand_back(batch: list[_Job], results: list[Result]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Result]]] = {}
        for job, result in zip(batch, results, strict=True):
            by_loop.setdefault(job.loop, []).append((job, result))
        for loop, done in by_loop.items():
            with suppress(RuntimeError):  # the loop has closed (shutdown): nobody is waiting any more
                loop.call_soon_threadsafe(_resolve_all, done)


def _resolve_all(done: list[tuple[_Job, Result]]) -> None:
    """On the event loop. A request may have been cancelled meanwhile; its row is stored all the same."""
    for job, result in done:
        if job.future.done():
            continue
        if isinstance(result, BaseException):
            job.future.set_exception(result)
        else:
            job.future.set_result(result)
