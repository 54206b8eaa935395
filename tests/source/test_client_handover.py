"""How the client's event loop hands batches to the thread that consumes them (pipeline/source/client.py): one
crossing of threads takes every batch waiting, up to a byte budget, so a consumer never falls behind by crossing
once per few small batches, and never holds more than the budget beyond the queue's bound."""

from __future__ import annotations

import asyncio

import pyarrow as pa

from pipeline.contract.tables import TABLES
from pipeline.source.client import TAKE_BYTES, PlatformClient
from pipeline.source.decoding import Batch


def _batch(values: int) -> Batch:
    records = pa.record_batch({"value": pa.array(range(values), pa.int64())})
    return Batch(TABLES["groups"], records, "/v1/groups", 1)


def _taken(batches: list[Batch]) -> list[Batch]:
    async def take() -> list[Batch]:
        queue: asyncio.Queue[Batch] = asyncio.Queue()
        for batch in batches:
            queue.put_nowait(batch)
        return await PlatformClient._take(queue)  # type: ignore[arg-type, return-value]

    return asyncio.run(take())


def test_one_crossing_takes_every_small_batch_waiting() -> None:
    waiting = [_batch(250) for _ in range(40)]  # a large no-change sync's group pages: ~2 KB to ~50 KB each
    assert _taken(waiting) == waiting


def test_one_crossing_takes_big_batches_up_to_the_byte_budget() -> None:
    size = 3 << 20
    waiting = [_batch(size // 8) for _ in range(10)]  # 3 MiB each, like pages of answers
    taken = _taken(waiting)
    beyond_first = [batch.records.nbytes for batch in taken[1:]]
    assert taken == waiting[: len(taken)]
    assert sum(beyond_first[:-1]) < TAKE_BYTES <= sum(beyond_first)  # stops at the first batch over the budget
    assert len(taken) < len(waiting)
