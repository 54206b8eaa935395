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
        async for page in core.pages(request):
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
