"""Exact sweeps of record streams under page drift.

The problem: offset pagination over a listing that changes while we page. Ordered by lastDate, an
update moves a record to the end; if it sat before our offset, every later record shifts back one place
and the one at the page boundary is skipped, though it never changed, and the next run's window
(cursor - lookback) may not reach back to it.

The detector: within one pass, a skip always comes with a key served twice. Look at one move of a
record Y and the slots between its old place and the end, each slot either served (S: its page already
fetched) or unserved (U). Every record in that range shifts back one slot: at a boundary U|S the record
leaves a served slot for an unserved one (it will be served again: a duplicate); at S|U it leaves an
unserved slot for a served one (a skip). The end is unserved while the sweep runs (the last page is
only trusted when asked after every earlier page arrived, see paging.record_pages). If Y's old slot
was served, Y itself is served again; if not, the range starts and ends unserved, so boundaries S|U and
U|S alternate and come in equal numbers. Either way a move that skips something serves something twice.
This holds for any fixed order and for out-of-order page fetching. A record that appears mid-sweep (new,
or on a platform whose reads lag, a version becoming visible) shifts the slots after it FORWARD: at S|U a
record is served again, at U|S one is skipped, and from its slot to the unserved end S|U boundaries are at
least as many as U|S ones, so there too a skip comes with a duplicate (the newcomer itself may be missed:
its version is the run's to leave to the next window, see pipeline/raw/windows.py). Hashing keys (8 bytes a
record) finds the duplicates; none means the pass skipped nothing.

Pages in flight together (paging.record_pages keeps up to READY_PER_SLOT x LESSONSYNC_CONCURRENCY of them ahead
once full pages keep coming: 1, 1, 2, 4, ...; at most LESSONSYNC_CONCURRENCY are in flight, a limit an overlapped
sync shares among streams). The argument above never uses the order in which pages are served, only two facts,
which concurrency keeps: (i) the platform cuts each page from the listing as it is at one instant, so at the
instant of any move every slot is either served (its page was cut before) or unserved, whatever order the requests
were sent, answered or arrived in; (ii) the end is unserved at every move of the sweep: the short page that ends it
is trusted only when it was requested after every earlier page had arrived, so it was cut after all of them
(otherwise it is asked again, alone), and pages fetched ahead past it are dropped. Nothing relies on a page being
asked after the previous one arrived, so the listing is not fetched one page at a time;
tests/source/test_source_concurrent_drift.py makes records drift while several pages are in flight and finds the
duplicates, the second pass and an exact result. (A listing that looks slow at its start pays one-time costs on its
first page, which is fetched alone: the token, the first-page probe and pyarrow's import of pandas on its first
conversion, 1-2 s in a fresh process.)

The remedy: sweep the whole window again (the warehouse keeps the latest version of each key, and a
later pass only serves newer versions); after `max_passes` the run reports complete=False so the caller
does not advance its cursor. Records new, changed or becoming visible during the pass may be missed; their
lastDate is after the data time the sweep started minus the read lag, which the next window still reaches
(the cursor rule and its proof: pipeline/raw/windows.py). A server that deletes records while we page also
shifts records back, invisibly: the spec has no deletions of active lessons; for snapshots, the warehouse
should mark vanished rows deleted only after a complete run.
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
