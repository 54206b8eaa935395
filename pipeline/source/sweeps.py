"""Exact sweeps of record streams under page drift.

The problem: offset pagination over a listing that changes while we page. Ordered by lastDate, an
update moves a record to the end; if it sat before our offset, every later record shifts back one place
and the one at the page boundary is skipped, though it never changed, and the next run's window
(cursor - lookback) may not reach back to it.

Within one pass a skip always comes with a key served twice, so a pass with no duplicate key skipped nothing;
otherwise the window is swept again. The proof, pages in flight together, and the remedy: docs/design.md,
"Exact sweeps under page drift".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import numpy as np

from pipeline.source.decoding import Page
from pipeline.source.errors import PlatformResponseError
from pipeline.source.fetching import SourceCore
from pipeline.source.paging import Request
from pipeline.source.stats import RunStats

log = logging.getLogger("lessonsync.source")
T = TypeVar("T")
HandlePage = Callable[[Request, Page], Awaitable[None]]


class KeyHashes:
    """64-bit hashes of the keys served in one pass (8 bytes a record), to find keys served twice."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []

    def add(self, hashes: np.ndarray | None) -> None:
        if hashes is not None and hashes.size:
            self._chunks.append(hashes)

    def served_twice(self) -> int:
        if not self._chunks:
            return 0
        hashes = np.concatenate(self._chunks)
        return int(hashes.size - np.unique(hashes).size)


async def sweep(core: SourceCore, request: Request, handle: HandlePage, stats: RunStats) -> bool:
    """Every page of `request` to `handle`, swept again while drift shows; True when a pass showed none."""
    stream = request.stream
    for number in range(1, core.max_passes + 1):
        stats.passes = max(stats.passes, number)
        seen = KeyHashes()
        repeats = RepeatedPages(request.endpoint)
        async for page in core.pages(request):
            repeats.check(page)
            seen.add(page.key_hashes)
            await handle(request, page)
        twice = seen.served_twice()
        if twice == 0 or stream.pager == "single":
            return True
        log.warning(
            "%s: %d record(s) of %s were served twice in pass %d (page drift: records changed while paging)%s",
            stats.stream,
            twice,
            request.endpoint,
            number,
            "; sweeping again"
            if number < core.max_passes
            else f"; giving up after {number} passes: the result is marked incomplete",
        )
    return False


class RepeatedPages:
    """A listing whose full pages keep serving the same keys, page after page, never ends: the platform ignores
    pageNumber. Drift makes two consecutive pages alike only by a shift of exactly a page, never
    SAME_PAGES_LIMIT times in a row, so that many identical full pages fail the sweep, naming the endpoint."""

    SAME_PAGES_LIMIT = 3

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._previous: np.ndarray | None = None
        self._same = 1

    def check(self, page: Page) -> None:
        hashes = page.key_hashes
        if hashes is None or hashes.size < 2 or hashes.size < page.served:
            self._previous, self._same = None, 1
            return
        ordered = np.sort(hashes)
        if self._previous is not None and np.array_equal(ordered, self._previous):
            self._same += 1
            if self._same >= self.SAME_PAGES_LIMIT:
                raise PlatformResponseError(
                    f"GET {self._endpoint}: {self._same} pages in a row up to page {page.location.page} serve the same "
                    f"{hashes.size} records: the platform ignores pageNumber and the listing would never end"
                )
        else:
            self._same = 1
        self._previous = ordered


async def run_pool(items: Iterable[T], work: Callable[[T], Awaitable[None]], workers: int) -> None:
    """`work` on every item with at most `workers` at once; the first failure cancels the rest."""
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:  # a shared iterator: each next() happens between awaits, so no item twice
            await work(item)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(workers):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise _first_error(failed) from None


def _first_error(error: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups: callers expect our own errors."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
