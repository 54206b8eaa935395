"""One stream's fetch into its warehouse load, in a thread of its own: the client's batches are written to the
load's Parquet parts in the lake as they arrive (on disk, never held whole), so the runner commits each load
when its fetch ends, whatever the others are doing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pipeline.raw.windows import Window
from pipeline.source import REQUEST_PRIORITY, URGENT, Batch, PlatformClient, RetryingRequest, RunStats
from pipeline.warehouse import Load, Warehouse, reached

# How long cancel() waits for a cancelled fetch to stop: the client's batches stop within seconds (their requests
# are dropped); other iterables stop at their next batch (past this, the thread, a daemon, is left to the process's end).
STOP_WAIT_SECONDS = 10.0


@dataclass(frozen=True)
class Fetched:
    """A finished fetch, ready to commit: its load (every batch written to the lake), the client's statistics
    of the stream run, and the window and cursor it was planned from."""

    load: Load
    stats: RunStats
    window: Window
    cursor_before: datetime | None
    started: float  # monotonic instant the fetch started


class FetchPlan(Protocol):
    """What a fetch was planned from (the answers' spilled window); closed when the fetch is cancelled."""

    def close(self) -> None: ...


class BackgroundFetch:
    """`batches` (lazy: a PlatformClient iterator) written to a new load of `stream` in a daemon thread."""

    def __init__(
        self,
        warehouse: Warehouse,
        client: PlatformClient,
        stream: str,
        run_id: str,
        window: Window,
        cursor_before: datetime | None,
        batches: Iterable[Batch],
        priority: int = URGENT,
        plan: FetchPlan | None = None,
        part_rows: int | None = None,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        self.stream = stream
        self.plan = plan  # what the fetch was planned from (the answers' plan), closed with it
        self.priority = priority  # of its requests, when others wait for a slot (pipeline/source/slots.py)
        self.window = window
        self.cursor_before = cursor_before
        self.started = time.monotonic()
        self.load = warehouse.load(stream=stream, run_id=run_id, started_at=datetime.now(UTC), part_rows=part_rows)
        self.pages = 0
        self.rows = 0
        self._client = client
        self._batches = batches
        self._stats: RunStats | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._discarded = False
        self._on_end = on_end  # told once the fetch has ended, successfully or not (the runner's wake-up)
        self._thread = threading.Thread(target=self._run, name=f"lessonsync-fetch-{stream}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        REQUEST_PRIORITY.set(self.priority)  # this thread's context: the stream's tasks start from a copy of it
        previous_page = None
        batches = iter(self._batches)
        try:
            for batch in batches:
                if self._stop.is_set():
                    break
                self.load.write(batch.table, batch.records)
                self.rows += batch.records.num_rows
                if (batch.endpoint, batch.page) != previous_page:  # a page yields one batch per table
                    self.pages, previous_page = self.pages + 1, (batch.endpoint, batch.page)
            else:
                self._stats = self._client.last_run_stats()  # this thread's own run (client.py)
                # The rows still buffered go to the lake's background writers now, so their encoding overlaps the
                # commits ahead of this one instead of starting at its own (the parts come out the same).
                self.load.flush()
        except BaseException as error:  # handed to the runner that waits for it, raised there
            self._error = error
        finally:
            try:  # now, not when garbage-collected: closing the iterator cancels the stream's requests
                close = getattr(batches, "close", None)
                if close is not None:
                    close()
            finally:
                try:
                    reached(f"fetch_ended:{self.stream}")
                finally:  # whatever a listener does, the runner waiting for this fetch is released
                    self._done.set()
                    if self._on_end is not None:
                        self._on_end()

    def retrying(self) -> tuple[RetryingRequest, ...]:
        """The client's requests waiting for their next try now (this stream's among them, or the token)."""
        return self._client.retrying()

    @property
    def ended(self) -> bool:
        """Whether the fetch has ended (its commit will not wait for the network), successfully or not."""
        return self._done.is_set()

    @property
    def fetched_whole(self) -> bool:
        """Whether the fetch has ended with every batch written to its load (its commit may go ahead)."""
        return self._done.is_set() and self._error is None and self._stats is not None

    def wait(self, report: Callable[[BackgroundFetch], None], every: float) -> Fetched:
        """The finished fetch; `report(self)` every `every` seconds meanwhile. A failed fetch discards its
        parts and raises its error here."""
        while not self._done.wait(every):
            report(self)
        if self._error is not None or self._stats is None:
            self._discard()
            raise self._error or RuntimeError(f"{self.stream}: the fetch stopped before its end")
        return Fetched(self.load, self._stats, self.window, self.cursor_before, self.started)

    def cancel(self) -> None:
        """Stop fetching and discard what was written (the run ended without committing this load)."""
        self._stop.set()
        stop = getattr(self._batches, "stop", None)
        if stop is not None:  # the client's batches: their requests end now, not at the next batch
            stop()
        self._thread.join(STOP_WAIT_SECONDS)
        if self._done.is_set():
            self._discard()
        if self.plan is not None:
            self.plan.close()  # e.g. the answers' spilled window: nothing will read it

    def _discard(self) -> None:
        if not self._discarded:
            self._discarded = True
            self.load.abort()
