"""Pagers: which page numbers to ask for and when to stop, per pager kind of a stream.

Record endpoints ("records"): stop on a short page. The first page is fetched alone; once it comes back
full, `max_window` pages are kept in flight, so a long stream keeps `concurrency` requests busy while a
one-page stream costs one request (and a long one at most max_window - 1 requests past its end). A
short page is only trusted as the last page when it was requested after every earlier page had
arrived; otherwise it is fetched again. Together with the duplicate-key
check of sweeps.py this keeps page drift detectable with out-of-order fetching (proof in sweeps.py).

Answer listings ("answers") page on active-lesson records, so a page may hold no answer rows mid-stream:
we never stop on a short or empty page by itself. The caller says how many active-lesson records the
request covers; pages are fetched until pages * pageSize covers them, then until one empty page. The
pages of one request are yielded in order; two are in flight at a time (a covering page and the
confirming one travel together), and requests for different lessons run concurrently (answers.py).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from math import ceil

from pipeline.source.requests import Page


@dataclass(frozen=True)
class Timed:
    page: Page
    started: float  # monotonic instants of the request
    finished: float


FetchPage = Callable[[int], Awaitable[Page]]


async def timed(fetch: FetchPage, number: int) -> Timed:
    started = time.monotonic()
    page = await fetch(number)
    return Timed(page, started, time.monotonic())


async def _drain(pending: deque[tuple[int, asyncio.Task[Timed]]]) -> None:
    for _, task in pending:
        task.cancel()
    await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
    pending.clear()


async def record_pages(fetch: FetchPage, first: int, page_size: int, max_window: int) -> AsyncIterator[Page]:
    """Pages in order until a short page, fetching ahead once the first page is full."""
    pending: deque[tuple[int, asyncio.Task[Timed]]] = deque()
    number, window, earlier_done = first, 1, 0.0
    try:
        while True:
            while len(pending) < window:
                pending.append((number, asyncio.create_task(timed(fetch, number))))
                number += 1
            current, task = pending.popleft()
            fetched = await task
            if fetched.page.served < page_size and fetched.started < earlier_done:
                await _drain(pending)  # asked before an earlier page arrived: ask again, now alone
                fetched = await timed(fetch, current)
                number, window = current + 1, 1
            yield fetched.page
            if fetched.page.served < page_size:
                return
            earlier_done = max(earlier_done, fetched.finished)
            window = max_window
    finally:
        await _drain(pending)


async def answer_pages(fetch: FetchPage, first: int, page_size: int, covers: int,
                       window: int = 2) -> AsyncIterator[Page]:
    """Pages in order: enough to cover `covers` active-lesson records, then until an empty page.

    Pages known to be needed (and the first confirming page) are fetched `window` at a time; past them,
    one page at a time while pages keep coming back non-empty.
    """
    pending: deque[tuple[int, asyncio.Task[Timed]]] = deque()
    number, last_known = first, first + ceil(covers / page_size)  # last_known: the first confirming page
    try:
        while True:
            while len(pending) < window and number <= last_known:
                pending.append((number, asyncio.create_task(timed(fetch, number))))
                number += 1
            current, task = pending.popleft()
            page = (await task).page
            yield page
            if current >= last_known:
                if page.served == 0:
                    return
                last_known = current + 1
    finally:
        await _drain(pending)


async def single_page(fetch: FetchPage) -> AsyncIterator[Page]:
    """Unpaginated operations: one request, no paging parameters."""
    yield await fetch(0)


def answer_request_cost(covers: int, page_size: int) -> int:
    """Requests an answer listing over `covers` active-lesson records costs: its pages plus one confirm."""
    return ceil(covers / page_size) + 1
