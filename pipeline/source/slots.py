"""The limit on requests in flight, with priorities: several streams share one transport in an overlapped sync
(pipeline/raw/runner.py), and a freed slot goes to the most urgent request waiting (the active lessons and the
answers, which the run's critical path waits for, before the snapshots, which fill the slots they leave)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from contextvars import ContextVar

URGENT, BACKGROUND = 0, 1
# The priority of the requests a task sends (lower first); asyncio tasks inherit it from their creator, and a
# thread's value reaches the tasks it starts through run_coroutine_threadsafe.
REQUEST_PRIORITY: ContextVar[int] = ContextVar("lessonsync_request_priority", default=URGENT)


class PrioritySlots:
    """At most `limit` holders at once; a freed slot goes to the waiter of the lowest priority number, first
    come first served within one priority. Use `async with slots:`; the priority is REQUEST_PRIORITY's."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the limit on requests in flight must be at least 1, got {limit}")
        self._free = limit
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (REQUEST_PRIORITY.get(), next(self._order), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed a slot in the same instant it was cancelled: pass it on
            raise

    def release(self) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():  # a cancelled waiter is skipped
                waiter.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
