"""Answer pages decoded in worker processes (pipeline/source/decode_workers.py): the same rows as when the client's
own thread decodes them, over real HTTP against the simulator; a page the fast path declines (a record to
quarantine) is still decoded here, with the same quarantine row; a worker that dies mid-run is replaced by the
client's own thread without losing a page; closing the client stops the processes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import orjson
import psutil
import pyarrow as pa
import pytest
from conftest import all_pairs, client_settings, rows_by_table, truth
from pydantic import SecretStr
from source_edge_server import SECRET, EdgeState, edge_server, raw
from source_expect import assert_same_table, expected_tables
from test_source_fast import answer

from pipeline.contract.streams import STREAMS
from pipeline.settings import Settings
from pipeline.source import answers
from pipeline.source.answers import run_answers
from pipeline.source.client import PlatformClient
from pipeline.source.decode_workers import DecodeWorkers
from pipeline.source.decoding import Batch, PageLocation
from pipeline.source.fetching import SourceCore
from pipeline.source.paging import Request

READY_SECONDS = 60  # a fresh interpreter importing pyarrow and the models; generous for a loaded machine


def _answers(
    settings: Settings, pairs: pa.Table, *, start: bool = True, kill_worker: bool = False, min_bytes: int = 0
) -> tuple[list[Batch], DecodeWorkers]:
    """run_answers over `pairs`, answer pages of `min_bytes` or more (by default all) offered to the workers,
    started beforehand unless `start` is False."""
    batches: list[Batch] = []

    async def emit(batch: Batch) -> None:
        batches.append(batch)

    async def scenario() -> DecodeWorkers:
        core = SourceCore(settings.client)
        workers = core.decode_workers
        workers.min_bytes = min_bytes
        if start:
            await asyncio.wrap_future(workers.start())
            if kill_worker:
                for pid in workers.process_ids():
                    os.kill(pid, signal.SIGKILL)
        try:
            await run_answers(core, pairs, None, emit)
        finally:
            await core.transport.aclose()
        return core.decode_workers

    workers = asyncio.run(asyncio.wait_for(scenario(), READY_SECONDS * 2))
    workers.close()
    return batches, workers


@pytest.fixture(scope="module")
def active_pairs(sim) -> pa.Table:
    with PlatformClient(client_settings(sim)) as client:
        return all_pairs(rows_by_table(client.iter_stream("active_lessons"))["active_lessons"])


def test_workers_decode_the_same_rows_as_the_clients_thread(sim, active_pairs):
    expected = expected_tables(truth(sim, "answers"))
    here, nobody = _answers(client_settings(sim, decode_processes=0), active_pairs)
    away, workers = _answers(client_settings(sim, decode_processes=1), active_pairs)
    assert nobody.pages == 0 and nobody.process_ids() == []
    assert workers.pages > 0  # the workers really decoded pages
    for table in ("answers", "answer_results"):
        assert_same_table(table, rows_by_table(away)[table], expected[table])
    # page for page the same batches (requests run concurrently, so pages arrive in another order)
    by_page = lambda batches: {(b.table.name, b.endpoint, b.page): b.records for b in batches}  # noqa: E731
    mine, theirs = by_page(away), by_page(here)
    assert len(mine) == len(away) and mine.keys() == theirs.keys()
    assert all(mine[page].equals(theirs[page]) for page in mine)


def test_a_dead_worker_hands_the_pages_back_to_the_clients_thread(sim, active_pairs, caplog):
    caplog.set_level(logging.WARNING, logger="lessonsync.source")
    expected = expected_tables(truth(sim, "answers"))
    batches, workers = _answers(client_settings(sim, decode_processes=1), active_pairs, kill_worker=True)
    assert workers.pages == 0
    assert "decoding answer pages in 1 worker process(es) stopped" in caplog.text
    for table in ("answers", "answer_results"):
        assert_same_table(table, rows_by_table(batches)[table], expected[table])


def test_a_large_plan_starts_the_workers_before_its_first_page_and_a_small_one_does_not(sim, active_pairs, monkeypatch):
    settings, small_pages = client_settings(sim, decode_processes=1), 10**9  # no page starts them
    _, small = _answers(settings, active_pairs, start=False, min_bytes=small_pages)
    assert active_pairs.num_rows < answers.START_AT_RECORDS and small.process_ids() == []
    monkeypatch.setattr(answers, "START_AT_RECORDS", active_pairs.num_rows)
    per_page = answers.plan_answer_requests(active_pairs, settings.page_size).records_per_page(settings.page_size)
    monkeypatch.setattr(answers, "START_AT_RECORDS_PER_PAGE", per_page)
    batches, large = _answers(settings, active_pairs, start=False, min_bytes=small_pages)
    assert len(large.process_ids()) == 1 and batches
    # as many to fetch, in pages holding fewer records than it takes (a 1%-change's per-lesson requests)
    monkeypatch.setattr(answers, "START_AT_RECORDS_PER_PAGE", per_page + 1)
    _, small_pages_plan = _answers(settings, active_pairs, start=False, min_bytes=small_pages)
    assert small_pages_plan.process_ids() == []
    monkeypatch.setattr(answers, "START_AT_RECORDS_PER_PAGE", per_page)
    # as many active lessons, but one of them to fetch (an incremental window): the plan is small
    one_to_fetch = active_pairs.append_column("refetch", pa.array([i == 0 for i in range(active_pairs.num_rows)]))
    _, incremental = _answers(settings, one_to_fetch, start=False, min_bytes=small_pages)
    assert incremental.process_ids() == []


def test_a_page_the_fast_path_declines_is_quarantined_here_as_before():
    records = [answer(i) for i in range(9)]
    records[4] = answer(4, quizType="final")
    state = EdgeState(body=[])
    pages = {"1": orjson.dumps(records)}
    by_page = lambda request: raw(pages.get(request.query_params["pageNumber"], b"[]"))(request)  # noqa: E731
    state.script = [by_page, by_page]
    with edge_server(state) as url:
        settings = Settings(
            base_url=url,
            app_secret=SecretStr(SECRET),
            first_page="1",
            page_size=50,
            max_attempts=3,
            retry_max_wait=0.5,
            data_dir="unused",
            decode_processes=1,
        )
        batches, workers = _answers(settings, pa.table({"user_id": ["u"], "lesson_id": ["L"]}))
    assert workers.pages == 0  # the worker declined it (and the empty confirming page)
    tables = rows_by_table(batches)
    [row] = tables["quarantine"]
    assert (row["record_index"], row["field"], row["page"]) == (4, "quizType", 1)
    assert "'final'" in row["message"] and orjson.loads(row["raw"]) == records[4]
    assert [r["question_id"] for r in tables["answers"]] == [f"q{i}" for i in range(9) if i != 4]


def test_only_large_answer_pages_go_and_closing_stops_the_processes():
    workers = DecodeWorkers(1, min_bytes=100)
    answers = Request(STREAMS["answers_by_lesson"], {"lesson_id": "L"})
    assert not workers.takes(Request(STREAMS["active_lessons"]), b"x" * 1000)  # record pages hash keys here
    assert not workers.takes(answers, b"x" * 99)  # small: cheaper here
    assert workers.process_ids() == []  # nothing started for pages that stay
    workers.takes(answers, b"x" * 100)  # starts them
    workers.start().result(READY_SECONDS)
    assert workers.takes(answers, b"x" * 100)
    [pid] = workers.process_ids()
    workers.close()
    assert not workers.takes(answers, b"x" * 100)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped


def test_no_worker_processes_is_a_valid_setting_and_negative_is_not():
    assert not DecodeWorkers(0, min_bytes=0).takes(Request(STREAMS["answers_by_lesson"], {"lesson_id": "L"}), b"[]")
    with pytest.raises(ValueError, match="0 or more"):
        DecodeWorkers(-1)


def test_workers_exit_when_the_answers_run_ends_and_the_next_run_starts_new_ones(sim, active_pairs):
    async def scenario() -> tuple[list[int], list[int]]:
        core = SourceCore(client_settings(sim, decode_processes=1).client)
        workers = core.decode_workers
        workers.min_bytes = 0

        async def emit(_: Batch) -> None:
            return None

        try:
            runs, exited = [], []
            for _ in range(2):
                await asyncio.wrap_future(workers.start())
                await run_answers(core, active_pairs, None, emit)
                runs.append(workers.pages)
                exited.append(await _exits(workers.process_ids()[-1]))  # before the client closes them
            return runs, exited
        finally:
            await core.transport.aclose()
            workers.close()

    runs, exited = asyncio.run(scenario())
    assert runs[0] > 0 and runs[1] > runs[0] and exited == [True, True]  # a worker per run, gone at its end


async def _exits(pid: int) -> bool:
    """Whether process `pid` (our child) exits within READY_SECONDS: a zombie until reaped, or gone."""
    for _ in range(READY_SECONDS * 10):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        await asyncio.sleep(0.1)
    return False


def test_a_page_offered_as_the_workers_are_released_is_decoded_here():
    workers = DecodeWorkers(1, min_bytes=0)
    request = Request(STREAMS["answers_by_user_lesson"], {"user_id": "u", "lesson_id": "L"})
    where = PageLocation(request.stream.name, request.endpoint, 1, {})
    body = orjson.dumps([answer(0)])
    try:
        workers.start().result(READY_SECONDS)
        assert workers.takes(request, body)
        page = asyncio.run(workers.page(request, body, where))
        assert page is not None and page.records == 1 and workers.pages == 1
        workers.release()  # the answers run ended between takes() and page()
        assert asyncio.run(workers.page(request, body, where)) is None and workers.pages == 1
        workers.start().result(READY_SECONDS)  # the next large fetch: new workers, nothing turned off
        assert workers.takes(request, body) and len(workers.process_ids()) == 2
    finally:
        workers.close()


def test_a_worker_loads_neither_pandas_nor_the_clients_http_stack_and_decodes_what_the_client_would():
    """pyarrow would import pandas at a worker's first conversion (~33 MiB per worker): kept out (memory.keep_pandas_out).
    The worker imports `pipeline.source` without the client (its names load on first use): no aiohttp, httpx or
    cryptography (~27 MiB per worker). It makes the very batches the client's own fast path makes."""
    from pipeline.source.fast_decoding import FastPages

    body = orjson.dumps([answer(i) for i in range(300)])
    request = Request(STREAMS["answers_by_lesson"], {"lesson_id": "L"})
    where = PageLocation("answers_by_lesson", "/v1/lessons/L/answers", 1, {})
    workers = DecodeWorkers(1)
    try:
        workers.start().result(READY_SECONDS)
        page = asyncio.run(workers.page(request, body, where))
        maps = Path(f"/proc/{workers.process_ids()[0]}/maps")
        mapped = maps.read_text() if os.path.exists("/proc/self/maps") else ""
    finally:
        workers.close()
    here = FastPages.for_stream(STREAMS["answers_by_lesson"]).page(request, body, where, False)
    assert page is not None and here is not None and workers.pages == 1
    assert [b.table.name for b in page.batches] == [b.table.name for b in here.batches]
    for theirs, ours in zip(page.batches, here.batches, strict=True):
        assert theirs.records.equals(ours.records)
    assert (page.served, page.records) == (here.served, here.records)
    assert "/pandas/" not in mapped  # none of pandas' extension modules loaded in the worker
    assert [stack for stack in ("/aiohttp/", "/cryptography/", "/multidict/", "/yarl/") if stack in mapped] == []
    assert "/pyarrow/" in mapped  # the maps were read: the worker's own libraries are there


def test_a_worker_returns_arrow_memory_as_the_client_does():
    """The worker inherits mimalloc's settings from the client's environment (pipeline/__init__.py)."""
    workers = DecodeWorkers(1)
    try:
        workers.start().result(READY_SECONDS)
        with open(f"/proc/{workers.process_ids()[0]}/environ", "rb") as environ:
            variables = dict(item.split(b"=", 1) for item in environ.read().split(b"\0") if b"=" in item)
    finally:
        workers.close()
    assert variables[b"MIMALLOC_ARENA_EAGER_COMMIT"] == os.environ["MIMALLOC_ARENA_EAGER_COMMIT"].encode()
    assert variables[b"MIMALLOC_PURGE_DELAY"] == os.environ["MIMALLOC_PURGE_DELAY"].encode()


def test_held_workers_start_nothing_until_the_hold_is_lifted_then_the_start_asked_for():
    workers = DecodeWorkers(1, min_bytes=0)
    request = Request(STREAMS["answers_by_lesson"], {"lesson_id": "L"})
    try:
        workers.hold()
        assert not workers.takes(request, b"[]")  # decoded here; the start it asks for waits
        workers.start()  # as a large plan asks (answers.py)
        assert workers.process_ids() == []
        workers.hold(False)  # the start asked for is made now, by nothing else
        assert _eventually(lambda: len(workers.process_ids()) == 1)
        workers.start().result(READY_SECONDS)  # the same start: no second process
        assert len(workers.process_ids()) == 1 and workers.takes(request, b"[]")
    finally:
        workers.close()


def test_a_hold_lifted_after_the_fetch_ended_starts_nothing_and_one_nothing_asked_for_neither():
    ended, never_asked = DecodeWorkers(1, min_bytes=0), DecodeWorkers(1, min_bytes=0)
    try:
        ended.hold()
        ended.start()  # the plan asked while held...
        ended.release()  # ...and the fetch ended before the answers step lifted the hold
        ended.hold(False)
        never_asked.hold()
        never_asked.hold(False)
        assert not _eventually(lambda: ended.process_ids() or never_asked.process_ids(), seconds=1)
    finally:
        ended.close()
        never_asked.close()


def _eventually(condition, seconds: float = READY_SECONDS) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
