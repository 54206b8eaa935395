"""Pager rules on scripted page sizes (pure logic; the HTTP side is covered against the simulator)."""

import asyncio

from pipeline.source.decoding import Page, PageLocation
from pipeline.source.paging import answer_pages, record_pages


def scripted(served: dict[int, int], delays: dict[int, float] | None = None):
    asked: list[int] = []

    async def fetch(number: int) -> Page:
        asked.append(number)
        await asyncio.sleep((delays or {}).get(number, 0.0))
        count = served.get(number, 0)
        return Page(PageLocation("s", "/v1/x", number, {}), count, [], records=count)

    return fetch, asked


def run(pager) -> list[int]:
    async def collect():
        return [page.location.page async for page in pager]

    return asyncio.run(collect())


def test_records_stop_on_the_first_short_page():
    fetch, asked = scripted({1: 10, 2: 10, 3: 4})
    assert run(record_pages(fetch, 1, 10, max_window=4)) == [1, 2, 3]
    assert asked[0] == 1 and set(asked) <= {1, 2, 3, 4, 5, 6}  # at most window - 1 pages past the end


def test_one_page_stream_costs_one_request():
    fetch, asked = scripted({0: 3})
    assert run(record_pages(fetch, 0, 10, max_window=8)) == [0]
    assert asked == [0]


def test_two_page_listing_costs_two_requests():
    # the users of one group: fetching max_window pages ahead after a full first page cost 1 + max_window requests
    fetch, asked = scripted({1: 10, 2: 4})
    assert run(record_pages(fetch, 1, 10, max_window=8)) == [1, 2]
    assert asked == [1, 2]


def counted_in_flight(full_pages: int):
    """A fetch of `full_pages` full pages (10 records) then short ones, and the pages in flight at each ask."""
    in_flight, most = [0], []

    async def fetch(number: int) -> Page:
        in_flight[0] += 1
        most.append(in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        count = 10 if number <= full_pages else 3
        return Page(PageLocation("s", "/v1/x", number, {}), count, [], records=count)

    return fetch, most


def test_pages_in_flight_double_up_to_the_window():
    fetch, most = counted_in_flight(30)
    assert run(record_pages(fetch, 1, 10, max_window=8)) == list(range(1, 32))
    assert most[:2] == [1, 1]  # the first two pages alone
    assert max(most) == 8 and max(most[:4]) <= 2  # then 2, 4, ... never more than the window


def test_a_listing_known_to_hold_records_asks_their_pages_at_once():
    fetch, most = counted_in_flight(6)
    # 55 records known: pages 1-5 are full and page 6 may be the short one, so six go out together
    assert run(record_pages(fetch, 1, 10, max_window=8, known_records=55)) == list(range(1, 8))
    assert most[:6] == [1, 2, 3, 4, 5, 6] and max(most) <= 8
    fetch, asked = scripted({1: 10, 2: 10, 3: 4})  # fewer records than known (some deleted): it still stops
    assert run(record_pages(fetch, 1, 10, max_window=4, known_records=50)) == [1, 2, 3]
    assert set(asked) <= {1, 2, 3, 4, 5, 6}


def test_short_page_asked_before_earlier_pages_arrived_is_asked_again():
    fetch, asked = scripted({1: 10, 2: 10, 3: 10, 4: 2}, delays={3: 0.2})
    assert run(record_pages(fetch, 1, 10, max_window=4)) == [1, 2, 3, 4]
    assert asked.count(4) == 2  # page 4 came back before page 3: not trusted as the end


def test_answers_never_stop_on_empty_pages_before_coverage():
    fetch, asked = scripted({1: 5, 2: 0, 3: 7, 4: 0})  # covers 5 active lessons with pageSize 2: 3 pages
    assert run(answer_pages(fetch, 1, 2, covers=5)) == [1, 2, 3, 4]
    assert sorted(asked) == [1, 2, 3, 4]


def test_answers_keep_going_until_an_empty_page_after_coverage():
    fetch, asked = scripted({1: 3, 2: 4, 3: 1, 4: 0})
    assert run(answer_pages(fetch, 1, 10, covers=3)) == [1, 2, 3, 4]


def test_answers_for_nothing_cost_one_confirming_request():
    fetch, asked = scripted({})
    assert run(answer_pages(fetch, 0, 10, covers=0)) == [0]
    assert asked == [0]
