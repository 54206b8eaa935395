"""What to ask the platform for: a stream's requests (endpoint with percent-encoded path values, fixed
parameters, updatedSince) and, per pager kind, which page numbers to ask for and when to stop.

Pagers only read how many records a page served (`Served`), so they know nothing of decoding.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from math import ceil
from typing import Generic, Literal, Protocol, TypeVar
from urllib.parse import quote

from pipeline.contract.streams import StreamSpec

UpdatedSinceFormat = Literal["iso8601", "iso8601-z", "epoch-ms"]


def format_updated_since(instant: datetime, style: UpdatedSinceFormat = "iso8601") -> str:
    """updatedSince as text. The spec does not show its format: ISO 8601 with offset by default."""
    if instant.tzinfo is None:
        raise ValueError(f"updated_since must be timezone-aware, got {instant!r}")
    utc = instant.astimezone(UTC)
    if style == "epoch-ms":  # floored: a window may start earlier, never later
        return str((utc - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1))
    text = utc.isoformat()
    return text.replace("+00:00", "Z") if style == "iso8601-z" else text


def encode_segment(value: str) -> str:
    """One path segment, percent-encoded so that '/', '?', '#', ' ', '%' and non-ASCII stay inside it (an id
    addresses its own resource and nothing else).

    Segments made only of dots are encoded too: httpx (like browsers) would resolve '.' and '..' away.
    """
    if value == "":
        raise ValueError("an empty id cannot address a resource (path segment would vanish)")
    if set(value) == {"."}:
        return value.replace(".", "%2E")
    return quote(value, safe="")


def fill_path(template: str, values: Mapping[str, str]) -> str:
    """`template` ("/v1/groups/{group_id}/users") with each placeholder percent-encoded."""
    return template.format(**{name: encode_segment(value) for name, value in values.items()})


@dataclass(frozen=True)
class Request:
    """A stream request; `covers`: the active-lesson records an answer listing covers (answers pager), or the
    records a listing is known to hold at least (records pager: its first pages are asked at once)."""

    stream: StreamSpec
    path_values: Mapping[str, str] = field(default_factory=dict)
    updated_since: str | None = None  # already formatted
    covers: int = 0

    @property
    def endpoint(self) -> str:
        return fill_path(self.stream.path, self.path_values)

    def params(self) -> dict[str, str]:
        params = dict(self.stream.params)
        if self.updated_since is not None and self.stream.incremental:
            params["updatedSince"] = self.updated_since
        return params


class Served(Protocol):
    """What a pager reads of a fetched page."""

    @property
    def served(self) -> int: ...  # records in the page as served, valid or not


PageT = TypeVar("PageT", bound=Served)  # a fetched page; decoding.Page in the client


@dataclass(frozen=True)
class Timed(Generic[PageT]):
    page: PageT
    started: float  # monotonic instants of the request
    finished: float


FetchPage = Callable[[int], Awaitable[PageT]]


async def timed(fetch: FetchPage[PageT], number: int) -> Timed[PageT]:
    started = time.monotonic()
    page = await fetch(number)
    return Timed(page, started, time.monotonic())


async def _drain(pending: deque[tuple[int, asyncio.Task[Timed[PageT]]]]) -> None:
    for _, task in pending:
        task.cancel()
    await asyncio.gather(*(task for _, task in pending), return_exceptions=True)
    pending.clear()


# Work kept ready per request the settings allow in flight: listings worked on at once (the answers' planned
# requests, the groups' member listings) and pages a long listing keeps ahead (record_pages's window, which
# counts the pages answered but not yet taken too). A listing takes its pages in order and, between two of them,
# waits for the page's decode and for the consumer; the page that ends it is asked alone. With one of each per
# slot, slots stand idle while their listing waits. Twice as many keep a request ready for every slot that frees
# (three are no better); the slots (transport.py) still bound what is in flight at LESSONSYNC_CONCURRENCY.
READY_PER_SLOT = 2


async def record_pages(
    fetch: FetchPage[PageT], first: int, page_size: int, max_window: int, known_records: int = 0
) -> AsyncIterator[PageT]:
    """Pages in order until a short page, fetching ahead as full pages keep coming: one page at a time for the
    first two, then 2, 4, ... up to `max_window` ahead (asked, or answered and not yet taken; the slots bound how
    many are in flight). Most listings of a snapshot are one or two pages (the users of one group): each page
    fetched ahead past the end is a request wasted, and once sent it holds its slot until answered. Jumping to
    `max_window` after a full first page would cost a two-page listing 1 + max_window requests instead of 2; a
    listing of thousands of pages reaches
    the full window after four pages. A listing known to hold at least `known_records` records (the answers' drift
    checks: the planned active lessons, or every record the first check found) asks its pages up to the first one
    that can be short at once: none of them can be past the end, and none waits for the ramp's round trips."""
    pending: deque[tuple[int, asyncio.Task[Timed[PageT]]]] = deque()
    known_full = known_records // page_size  # pages that cannot be short, the last one asked with them

    def ahead(full_pages: int) -> int:
        ramp = 2 ** (full_pages - 1) if full_pages else 1
        return min(max_window, max(ramp, known_full - full_pages + 1))

    number, window, earlier_done, full_pages = first, ahead(0), 0.0, 0
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
            full_pages += 1
            window = ahead(full_pages)
    finally:
        await _drain(pending)


async def answer_pages(
    fetch: FetchPage[PageT], first: int, page_size: int, covers: int, window: int = 2
) -> AsyncIterator[PageT]:
    """Pages in order: enough to cover `covers` active-lesson records, then until an empty page.

    Pages known to be needed (and the first confirming page) are fetched `window` at a time; past them,
    one page at a time while pages keep coming back non-empty.
    """
    pending: deque[tuple[int, asyncio.Task[Timed[PageT]]]] = deque()
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


async def single_page(fetch: FetchPage[PageT]) -> AsyncIterator[PageT]:
    """Unpaginated operations: one request, no paging parameters."""
    yield await fetch(0)


def answer_request_cost(covers: int, page_size: int) -> int:
    """Requests an answer listing over `covers` active-lesson records costs: its pages plus one confirm."""
    return ceil(covers / page_size) + 1
