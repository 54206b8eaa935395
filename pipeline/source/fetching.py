"""The async engine shared by every stream (SourceCore): first page number, the pages of one request per
pager kind, each decoded to Arrow batches at once, emitted with run statistics and progress logging.

Freed memory goes back to the OS while streams run (release_free_memory), so the client's resident memory
stays flat. Pages of answers are megabytes, received, decoded and freed thousands of times, interleaved with
small long-lived allocations; glibc's malloc keeps the freed space of its arenas mapped (it only returns the
top of a heap by itself), so the resident set drifts up with the length of a run (tens of MiB of
free-but-resident arena space at scale large).
`malloc_trim(0)` releases the free pages anywhere in every arena (glibc >= 2.8, madvise), and Arrow's
pool is asked to do the same. Called every RELEASE_EVERY_PAGES pages and at the end of every run; it
costs a few milliseconds (a fraction of a percent of the decoding work it follows). Elsewhere than
glibc (musl, macOS) only Arrow's pool is asked.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from operator import itemgetter
from typing import Any

import pyarrow as pa

from pipeline.contract.evolution import SchemaPolicy
from pipeline.contract.streams import StreamSpec
from pipeline.settings import ClientSettings
from pipeline.source.decode_workers import DecodeWorkers
from pipeline.source.decoding import (
    Batch,
    Page,
    PageDecoder,
    PageLocation,
    arrow_page,
    gc_paused,
    record_key_fields,
)
from pipeline.source.errors import PlatformRequestError
from pipeline.source.evolution import SchemaEvolution, has_extras
from pipeline.source.fast_decoding import FastPages
from pipeline.source.page_cache import PageCache, cacheable
from pipeline.source.paging import (
    READY_PER_SLOT,
    Request,
    UpdatedSinceFormat,
    answer_pages,
    record_pages,
    single_page,
)
from pipeline.source.stats import Progress, RunStats
from pipeline.source.transport import STREAM_COUNTER, Transport, TransportStats, json_body

log = logging.getLogger("lessonsync.source")
Emit = Callable[[Batch], Awaitable[None]]
PROBE_PATH = "/v1/active-lessons"


def first_page_from_probe(page0: list[Any] | None, page1: list[Any]) -> int:
    """The API's first pageNumber from pages 0 and 1 with pageSize=1 (page0 None = rejected with 400).

    0 rejected -> 1. Page 0 empty, page 1 not -> 1. Both non-empty and equal -> 1 (0 is read as 1).
    Both non-empty and different, or page 0 non-empty and page 1 empty -> 0. Both empty (no data to tell)
    -> 0: on a 1-based API that reads 0 as 1 this repeats a page (duplicates), never skips one.
    """
    if page0 is None:
        return 1
    if not page0:
        return 1 if page1 else 0
    return 1 if page1 and page0[0] == page1[0] else 0


class SourceCore:
    def __init__(
        self,
        settings: ClientSettings,
        *,
        max_passes: int = 3,
        updated_since_format: UpdatedSinceFormat = "iso8601",
        page_cache: PageCache | None = None,
        schema: SchemaPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.page_cache = page_cache
        # what fields the models do not declare become (evolution.py); None: they stay in `extra`, nothing else
        self.evolution = None if schema is None else SchemaEvolution(schema)
        self.transport = Transport(settings)
        self.max_passes = max_passes
        self.updated_since_format = updated_since_format
        self._first_page = settings.first_page_number  # None: probed
        self._probe_lock = asyncio.Lock()
        self._decoders: dict[str, PageDecoder] = {}
        self._fast: dict[str, FastPages | None] = {}
        self.decode_workers = DecodeWorkers(settings.decode_processes)  # closed by PlatformClient.close
        self._pages_emitted = 0

    @property
    def kept_ready(self) -> int:
        """Listings worked on at once, and pages a long listing keeps ahead (paging.READY_PER_SLOT)."""
        return READY_PER_SLOT * self.settings.concurrency

    async def first_page(self) -> int:
        if self._first_page is None:
            async with self._probe_lock:
                if self._first_page is None:
                    self._first_page = await self._probe_first_page()
        return self._first_page

    async def _probe_first_page(self) -> int:
        async def page(number: int) -> list[Any] | None:
            params = {"pageSize": "1", "pageNumber": str(number)}
            try:
                return await self.transport.get(PROBE_PATH, params, json_body)
            except PlatformRequestError as exc:
                if exc.status == 400:
                    return None
                raise

        page0, page1 = await page(0), await page(1)
        first = first_page_from_probe(page0, page1 or [])
        log.info(
            "first pageNumber of the platform: %d (probed %s)%s",
            first,
            PROBE_PATH,
            "" if page0 or page1 else "; no data to tell, assumed 0 (repeats a page rather than skip one)",
        )
        return first

    def decoder(self, stream: StreamSpec) -> PageDecoder:
        if stream.name not in self._decoders:
            self._decoders[stream.name] = PageDecoder(stream)
        return self._decoders[stream.name]

    def fast_pages(self, stream: StreamSpec) -> FastPages | None:
        if stream.name not in self._fast:
            self._fast[stream.name] = FastPages.for_stream(stream)
        return self._fast[stream.name]

    async def pages(self, request: Request) -> AsyncIterator[Page]:
        """Every page of `request`, in order, as its pager kind says."""
        stream, endpoint, base = request.stream, request.endpoint, request.params()
        decoder, fast, size = self.decoder(stream), self.fast_pages(stream), self.settings.page_size
        key = self.key_getter(stream) if stream.pager == "records" else None
        cache = self.page_cache if self.page_cache is not None and cacheable(stream.table) else None
        key_fields = record_key_fields(stream) if key is not None else None

        async def fetch(number: int) -> Page:
            params = base if stream.pager == "single" else {**base, "pageSize": str(size), "pageNumber": str(number)}
            where = PageLocation(stream.name, endpoint, number, params)

            def decode_here(body: bytes) -> Page:
                # the fast path (fast_decoding.py) when it can decode the page exactly, else the validated path
                # (decoding.py: quarantine, extras, truncated bodies); either way Arrow at once, inside the
                # retried attempt, so dicts or Structs never wait in line
                page = None if fast is None else fast.page(request, body, where, key is not None)
                if page is not None:
                    return keep_body(page, body)
                with gc_paused():
                    return keep_body(arrow_page(request, decoder.decode(body, where), key), body)

            async def decode_in_worker(body: bytes) -> Page:
                # the same fast path in a worker process (decode_workers.py); whatever it does not hand back is
                # decoded here, so quarantine, extras and errors stay the validated path's, raised here
                page = await self.decode_workers.page(request, body, where)
                return keep_body(page, body) if page is not None else decode_here(body)

            def decode(body: bytes) -> Page | Awaitable[Page]:
                if cache is not None:  # a snapshot page served as before is not decoded again
                    return keep_body(cache.page(where, body, key_fields, decode_here), body)
                return decode_in_worker(body) if self.decode_workers.takes(request, body) else decode_here(body)

            return await self.transport.get(endpoint, params, decode)

        if stream.pager == "single":
            pager = single_page(fetch)
        elif stream.pager == "answers":
            pager = answer_pages(fetch, await self.first_page(), size, request.covers)
        else:
            pager = record_pages(fetch, await self.first_page(), size, self.kept_ready, request.covers)
        async for page in pager:
            yield page

    @staticmethod
    def key_getter(stream: StreamSpec) -> Callable[[Any], Any]:
        """Reads a record's key (API names) from its dict, for drift detection."""
        fields = stream.model.model_fields
        return itemgetter(*[fields[k].alias or k for k in record_key_fields(stream)])

    async def emit_page(self, page: Page, emit: Emit, stats: RunStats, progress: Progress) -> None:
        if self.evolution is not None:
            page = self.evolution.apply(page, stats)
        stats.note_page(page)
        progress.page(page.records)
        for batch in page.batches:
            await emit(batch)
        self._pages_emitted += 1
        if self._pages_emitted % RELEASE_EVERY_PAGES == 0:
            release_free_memory()

    def start_stats(self, stream: str) -> RunStats:
        """Statistics of a stream run starting in the current task: its requests and retries are counted apart
        from those of other streams sharing this transport (transport.STREAM_COUNTER)."""
        counter = TransportStats(stream=stream)
        STREAM_COUNTER.set(counter)
        return RunStats.begin(stream, counter)


def keep_body(page: Page, body: bytes) -> Page:
    """The page, holding its body until the schema step when it has unknown fields (a record that step quarantines
    is kept as served); any other page holds no more than its batches."""
    if any(has_extras(batch.records) for batch in page.batches):
        page.body = body
    return page


# Handing freed memory back to the OS

RELEASE_EVERY_PAGES = 32


def _glibc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_trim = _glibc_trim()


def release_free_memory() -> None:
    """Returns free heap pages to the OS (glibc arenas and Arrow's default pool)."""
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)
