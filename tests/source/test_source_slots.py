"""The limit on requests in flight shared by the streams of a run: never exceeded (also with more answer listings
worked on than there are slots, over real HTTP), freed slots go to the most urgent waiter first, and a cancelled
waiter neither keeps nor loses a slot."""

import asyncio

from conftest import all_pairs, client_settings, rows_by_table, truth
from source_expect import assert_same_table, expected_tables

from pipeline.source.client import PlatformClient
from pipeline.source.paging import READY_PER_SLOT
from pipeline.source.slots import BACKGROUND, REQUEST_PRIORITY, URGENT, PrioritySlots
from simulator import SimulatorConfig, start_simulator


def test_the_limit_holds_and_urgent_requests_get_freed_slots_first():
    async def scenario() -> tuple[int, list[str]]:
        slots, holding, most, order = PrioritySlots(2), 0, 0, []

        async def request(name: str, priority: int) -> None:
            nonlocal holding, most
            REQUEST_PRIORITY.set(priority)
            async with slots:
                holding += 1
                most = max(most, holding)
                order.append(name)
                await asyncio.sleep(0.01)
                holding -= 1

        tasks = [asyncio.create_task(request(f"background{i}", BACKGROUND)) for i in range(4)]
        await asyncio.sleep(0)  # two background requests hold the slots, two wait
        tasks += [asyncio.create_task(request(f"urgent{i}", URGENT)) for i in range(2)]
        await asyncio.gather(*tasks)
        return most, order

    most, order = asyncio.run(scenario())
    assert most == 2
    # the two already holding went first; then the urgent ones, though they came after the waiting background ones
    assert order[:2] == ["background0", "background1"] and order[2:4] == ["urgent0", "urgent1"]
    assert order[4:] == ["background2", "background3"]


def test_a_cancelled_waiter_leaves_the_slots_as_they_were():
    async def scenario() -> list[str]:
        slots, got = PrioritySlots(1), []
        await slots.acquire()
        waiter = asyncio.create_task(slots.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        slots.release()  # the slot is free again, not handed to the cancelled waiter

        async def take(name: str) -> None:
            async with slots:
                got.append(name)

        await asyncio.wait_for(asyncio.gather(take("a"), take("b")), timeout=2)
        return got

    assert asyncio.run(scenario()) == ["a", "b"]


def test_answers_work_on_more_planned_requests_than_slots_but_never_exceed_the_slots():
    """paging.READY_PER_SLOT planned requests per slot are worked on at once; the server still never holds more
    requests than LESSONSYNC_CONCURRENCY, and every answer arrives as the platform has it."""
    assert READY_PER_SLOT > 1
    with start_simulator(SimulatorConfig(seed=5, scale="tiny", faults="latency_ms=20")) as sim:
        with PlatformClient(client_settings(sim, concurrency=3, page_size=5)) as client:
            active = rows_by_table(client.iter_stream("active_lessons"))["active_lessons"]
            got = rows_by_table(client.iter_answers(all_pairs(active)))
        most = sim.stats()["max_in_flight"]  # the simulator's own count, for every request of the client
        expected = expected_tables(truth(sim, "active_lessons", "answers"))
    assert most == 3  # the slots were all used, never more
    for table in ("answers", "answer_results"):
        assert_same_table(table, got.get(table, []), expected[table])
