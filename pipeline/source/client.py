"""PlatformClient: the synchronous face of the source client, for Dagster assets and scripts.

    with PlatformClient(settings) as client:
        for batch in client.iter_stream("active_lessons", updated_since=window_start):
            warehouse.upsert(batch)                      # Batch(table, records, endpoint, page)
        stats = client.last_run_stats()                  # requests, retries, pages, complete, ...

Fetching runs on an asyncio event loop in a background thread and feeds a bounded queue, so memory
stays flat and the consumer writes DuckDB/Parquet while the next pages download. Stopping the iteration
early (break, exception) cancels the fetching cleanly.

Record streams (active_lessons, groups with their users, lessons, sessions, categories) run here (run_stream):
requests built from the stream declarations, swept exactly, batches emitted, statistics returned; answers run
in answers.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from pipeline.contract.declarations import ANSWER_STREAMS
from pipeline.contract.evolution import SchemaPolicy
from pipeline.contract.streams import STREAMS, SYNC_STREAMS, StreamSpec
from pipeline.settings import ClientSettings, Settings, load_settings
from pipeline.source.answers import run_answers
from pipeline.source.decoding import Batch, Page
from pipeline.source.errors import SourceStopped
from pipeline.source.evolution import SchemaEvolution
from pipeline.source.fetching import Emit, SourceCore, release_free_memory
from pipeline.source.page_cache import PageCache
from pipeline.source.paging import Request, UpdatedSinceFormat, fill_path, format_updated_since
from pipeline.source.stats import Progress, RunStats
from pipeline.source.sweeps import HandlePage, run_pool, sweep
from pipeline.source.transport import RetryingRequest, json_body

log = logging.getLogger("lessonsync.source")


# Record-stream runs


def runnable_streams() -> list[str]:
    """The streams iter_stream runs: every declared stream but the planned ones (their planner runs them)."""
    return [name for name, stream in SYNC_STREAMS.items() if stream.planned is None]


def runnable_stream(name: str, updated_since: datetime | None) -> StreamSpec:
    """The listing of stream `name`, checked for use with iter_stream; errors say what to call instead."""
    if name == "answers" or name in ANSWER_STREAMS:
        raise ValueError(
            "answers are fetched for changed active lessons: use iter_answers(changed_pairs, updated_since=...)"
        )
    if name not in runnable_streams():
        raise ValueError(f"unknown stream {name!r}; streams: {', '.join(runnable_streams())}")
    stream = STREAMS[name]
    if updated_since is not None and not stream.incremental:
        raise ValueError(f"stream {name} is a snapshot, pulled whole; call it without updated_since")
    return stream


async def run_stream(core: SourceCore, name: str, updated_since: datetime | None, emit: Emit) -> RunStats:
    """Every record of stream `name` (changed since `updated_since` for incremental streams)."""
    stream = runnable_stream(name, updated_since)
    stats, progress = core.start_stats(name), Progress(name)
    began = time.time()
    mark = core.transport.clock_mark()
    since = None if updated_since is None else format_updated_since(updated_since, core.updated_since_format)

    async def handle(request: Request, page: Page) -> None:
        await core.emit_page(page, emit, stats, progress)

    request = Request(stream, updated_since=since)
    if stream.substream is None:
        stats.complete = await sweep(core, request, handle, stats)
    else:
        stats.complete = await _with_substream(core, request, handle, stats)
    if not stats.complete:
        log.warning(
            "%s: page drift persisted; the rows were yielded but the result is marked incomplete: "
            "do not advance the cursor past this window",
            name,
        )
    stats.server_time_at_start = mark.server_start()
    if stats.complete and core.page_cache is not None:  # the pages of this run are the ones worth keeping
        substream = () if stream.substream is None else (stream.substream.stream,)
        core.page_cache.forget_unused((stream.name, *substream), began)
    progress.report("done")
    return stats.finish()


async def _with_substream(core: SourceCore, request: Request, handle: HandlePage, stats: RunStats) -> bool:
    """The parent listing (e.g. groups), then the sub-listing of every parent (its users), concurrently.

    Parent ids are kept (a dict, in order, deduplicated across passes); the sub-records are not: a user in
    several groups is yielded once per group and the warehouse dedupes `users` on its key.
    """
    sub = request.stream.substream
    assert sub is not None
    parents: dict[str, None] = {}

    async def handle_parent(parent_request: Request, page: Page) -> None:
        if page.own is not None:
            parents.update(dict.fromkeys(page.own.column(sub.column).to_pylist()))
        await handle(parent_request, page)

    complete = await sweep(core, request, handle_parent, stats)
    child_stream = STREAMS[sub.stream]
    results: list[bool] = []

    async def one(parent_id: str) -> None:
        child = Request(child_stream, {sub.placeholder: parent_id})
        results.append(await sweep(core, child, handle, stats))

    await run_pool(parents, one, core.kept_ready)
    return complete and all(results)


# The synchronous face

T = TypeVar("T")
# Batches handed to the consuming thread in one crossing of threads, beyond the first: as many as wait, up to this
# many bytes. A crossing waits for the event loop's turn, which is busy with responses: a consumer that takes a
# fixed few batches a crossing falls behind the many small batches of a snapshot, and the full queue then stalls the
# requests. Memory: the queue's bound plus this budget.
TAKE_BYTES = 8 << 20


@dataclass(frozen=True)
class _End:
    stats: RunStats | None = None
    error: BaseException | None = None


async def _on_loop(call: Callable[[], object]) -> None:
    call()


class Batches(Iterator[Batch]):
    """The batches of one stream run (PlatformClient.iter_stream, iter_answers): an iterator that another thread
    can `stop()`: its requests are dropped within seconds and the iterating thread gets SourceStopped."""

    def __init__(self, client: PlatformClient, run: Callable[[Emit], Awaitable[RunStats]]) -> None:
        self._client = client
        self._stopped = False
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Task[None], asyncio.Queue[Batch | _End]] | None
        self._running = None
        self._batches = client._iterate(run, self)
        _LIVE.add(self)

    def __next__(self) -> Batch:
        return next(self._batches)

    def close(self) -> None:
        self._batches.close()

    def started(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[None], queue: asyncio.Queue[Any]) -> None:
        self._running = (loop, task, queue)
        if self._stopped:
            self.stop()

    def stop(self) -> None:
        """Stop fetching (thread-safe, idempotent); the iterating thread's next() raises SourceStopped."""
        self._stopped = True
        if self._running is not None:
            loop, task, queue = self._running
            if not loop.is_closed():
                loop.call_soon_threadsafe(_stop_task, task, queue)

    @property
    def stopped(self) -> bool:
        return self._stopped


def _stop_task(task: asyncio.Task[None], queue: asyncio.Queue[Batch | _End]) -> None:
    """Cancel a stream run's task; once it has ended, its consumer finds SourceStopped at the head of the queue
    (batches still queued are dropped: a stopped fetch is discarded)."""

    def tell_consumer(_: object) -> None:
        while queue.full():
            queue.get_nowait()
        queue.put_nowait(_End(error=SourceStopped("the fetch was stopped before its end (its run is ending)")))

    if not task.done():
        task.add_done_callback(tell_consumer)
        task.cancel()


# Every stream run not yet finished, in any client of the process: stop_all_fetches() ends them (SIGTERM).
_LIVE: weakref.WeakSet[Batches] = weakref.WeakSet()


def stop_all_fetches() -> int:
    """Stop every stream run of this process (thread-safe); returns how many were running."""
    live = [batches for batches in list(_LIVE) if not batches.stopped]
    for batches in live:
        batches.stop()
    return len(live)


class PlatformClient:
    """Reads the platform's API into Arrow batches; use as a context manager (or open()/close()).

    settings: base URL, app secret, page size, first page, concurrency, timeouts, retries (LESSONSYNC_*): the
    client's part of the settings (Settings.client), or the settings it is taken from; None: load_settings().
    max_passes: sweeps of a window under page drift before a run is reported incomplete.
    queue_batches: batches fetched ahead of the consumer (memory bound, together with concurrency).
    updated_since_format: how updatedSince is written ("iso8601", "iso8601-z" or "epoch-ms"); the spec
    does not show it.
    page_cache: a directory keeping decoded snapshot pages (page_cache.py), or None: decode every page.
    schema: each table's schema contract and discovered columns (evolution.py); None: fields the models do not
    declare stay in `extra` and no batch has more than the declared columns.
    """

    def __init__(
        self,
        settings: Settings | ClientSettings | None = None,
        *,
        max_passes: int = 3,
        queue_batches: int = 16,
        updated_since_format: UpdatedSinceFormat = "iso8601",
        page_cache: Path | None = None,
        schema: SchemaPolicy | None = None,
    ) -> None:
        if max_passes < 1 or queue_batches < 1:
            raise ValueError(f"max_passes ({max_passes}) and queue_batches ({queue_batches}) must be at least 1")
        self.settings = settings if isinstance(settings, ClientSettings) else (settings or load_settings()).client
        self._options = {
            "max_passes": max_passes,
            "updated_since_format": updated_since_format,
            "page_cache": None if page_cache is None else PageCache(page_cache),
            "schema": schema,
        }
        self._queue_batches = queue_batches
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._core: SourceCore | None = None
        # Per consumer thread: several threads may each iterate a stream of one client at once (an overlapped
        # sync's background fetches share its transport), and each asks for the statistics of its own run.
        self._last = threading.local()

    def __repr__(self) -> str:
        return (
            f"PlatformClient(base_url={self.settings.base_url!r}, page_size={self.settings.page_size}, "
            f"concurrency={self.settings.concurrency})"
        )

    def __enter__(self) -> PlatformClient:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self) -> None:
        if self._loop is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lessonsync-source", daemon=True)
        self._thread.start()
        self._core = self._call(self._make_core())

    async def _make_core(self) -> SourceCore:  # built inside the loop that will use it
        return SourceCore(self.settings, **self._options)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._loop is None:
            return
        try:
            if self._core is not None:
                try:
                    self._call(self._core.transport.aclose())
                finally:
                    self._core.decode_workers.close()  # from this thread: it waits for the processes to exit
                    if self._core.page_cache is not None:
                        self._core.page_cache.close()  # the entries still being written
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            assert self._thread is not None
            self._thread.join()
            self._loop.close()
            self._loop = self._thread = self._core = None

    def iter_stream(self, name: str, *, updated_since: datetime | None = None) -> Iterator[Batch]:
        """Batches of stream `name` (see runnable_streams); incremental streams take
        `updated_since` (aware datetime, the window start). Stats: last_run_stats() after the end."""
        runnable_stream(name, updated_since)  # fail here, not at the first next()
        return Batches(self, lambda emit: run_stream(self._ready(), name, updated_since, emit))

    def iter_answers(self, changed_pairs: pa.Table, *, updated_since: datetime | None = None) -> Iterator[Batch]:
        """Answers (and answer_results) of the changed active lessons: `changed_pairs` has columns user_id,
        lesson_id for EVERY active lesson with last_date >= updated_since (all when it is None)."""
        return Batches(self, lambda emit: run_answers(self._ready(), changed_pairs, updated_since, emit))

    def hold_decode_workers(self, held: bool = True) -> None:
        """While held, no decode worker process starts: answer pages are decoded on the client's own thread, and
        a start asked for meanwhile is made when the hold is lifted (decode_workers.py)."""
        workers = self._ready().decode_workers
        self._call(_on_loop(lambda: workers.hold(held)))

    def last_run_stats(self) -> RunStats:
        """Statistics of the last stream run that this thread iterated to its end."""
        stats: RunStats | None = getattr(self._last, "stats", None)
        if stats is None:
            raise RuntimeError("no stream has run to its end on this client in this thread yet")
        return stats

    def retrying(self) -> tuple[RetryingRequest, ...]:
        """The requests waiting for their next try now, any stream's (thread-safe)."""
        return self._core.transport.retrying() if self._core is not None else ()

    def get_json(self, path: str, *, path_values: Mapping[str, str] | None = None, **params: str) -> Any:
        """One authenticated GET (single resources): `path` placeholders are filled from `path_values`,
        percent-encoded; keyword arguments are query parameters."""
        endpoint = fill_path(path, path_values or {})
        return self._call(self._ready().transport.get(endpoint, params, json_body))

    def server_time(self) -> datetime:
        """The platform's clock as of its latest Date header (local UTC now before any response)."""
        return self._ready().transport.server_time()

    def first_page(self) -> int:
        """The API's first pageNumber (probed once when LESSONSYNC_FIRST_PAGE=auto)."""
        return self._call(self._ready().first_page())

    def use_schema(self, schema: SchemaPolicy) -> None:
        """The schema step of the streams fetched from now on, for a client opened (its token exchange under way)
        before the warehouse's discovered columns were read; call it before the first stream is fetched."""
        self._options["schema"] = schema
        if self._core is not None:
            self._core.evolution = SchemaEvolution(schema)

    def _ready(self) -> SourceCore:
        if self._core is None:
            self.open()
        assert self._core is not None
        return self._core

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _iterate(self, run: Callable[[Emit], Awaitable[RunStats]], handle: Batches) -> Generator[Batch, None, None]:
        self._ready()
        queue: asyncio.Queue[Batch | _End] = self._call(self._new_queue())
        task = self._call(self._start(run, queue))
        assert self._loop is not None
        handle.started(self._loop, task, queue)
        try:
            while True:
                for item in self._call(self._take(queue)):
                    if isinstance(item, _End):
                        if item.error is not None:
                            raise item.error
                        self._last.stats = item.stats
                        return
                    yield item
        finally:
            self._call(self._cancel(task))
            release_free_memory()

    @staticmethod
    async def _take(queue: asyncio.Queue[Batch | _End]) -> list[Batch | _End]:
        """The next item and every other one already waiting: one crossing of threads for all of them. At most
        TAKE_BYTES of batches beyond the first, so the consumer holds a few MiB beyond the queue's bound."""
        items = [await queue.get()]
        taken = 0
        while not queue.empty() and taken < TAKE_BYTES:
            item = queue.get_nowait()
            items.append(item)
            taken += item.records.nbytes if isinstance(item, Batch) else 0
        return items

    async def _new_queue(self) -> asyncio.Queue[Batch | _End]:
        return asyncio.Queue(maxsize=self._queue_batches)

    async def _start(
        self, run: Callable[[Emit], Awaitable[RunStats]], queue: asyncio.Queue[Batch | _End]
    ) -> asyncio.Task[None]:
        async def produce() -> None:
            try:
                stats = await run(queue.put)
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # handed to the consumer thread, raised there
                await queue.put(_End(error=error))
            else:
                await queue.put(_End(stats=stats))

        return asyncio.create_task(produce())

    @staticmethod
    async def _cancel(task: asyncio.Task[None]) -> None:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
