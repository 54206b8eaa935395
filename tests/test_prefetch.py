"""Background fetches of a run (pipeline/prefetch) against the simulator over HTTP and a real lake: a run that
ends before its steps took them stops them and leaves nothing in the lake; one client serves the whole run."""

from __future__ import annotations

import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from pipeline.contract.tables import TABLES
from pipeline.defs.progress.answer_versions import VERSIONS, spill_window_active_lessons
from pipeline.defs.progress.answers_ahead import AnswersPlan
from pipeline.defs.windows import Window, cursor_window
from pipeline.prefetch.background import BackgroundFetch
from pipeline.prefetch.plan import start_prefetch
from pipeline.prefetch.runs import add_prefetched, close_run, run_fetches, take_prefetched
from pipeline.settings import Settings
from pipeline.warehouse import Warehouse
from pipeline.warehouse.lake import list_manifests
from simulator import SimulatorConfig, start_simulator


def _files(lake: Path) -> list[Path]:
    return [p for p in lake.rglob("*") if p.is_file()]


def test_fetches_no_step_took_are_stopped_at_the_run_end_and_leave_nothing(tmp_path: Path) -> None:
    with start_simulator(SimulatorConfig(seed=42, scale="tiny", faults="latency_ms=100")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=5, concurrency=2, data_dir=str(tmp_path))
        lake = tmp_path / "lake"
        warehouse = Warehouse(tmp_path / "warehouse.duckdb", lake, row_group_rows=5)  # parts on disk at once
        steps = ["lms__active_lessons", "answers", "sync_groups", "sync_categories", "analytics_models"]
        with run_fetches("run-1", settings) as run:
            assert run.should_prefetch() and not run.should_prefetch()  # once per run
            started = start_prefetch(run, warehouse, steps, lambda cursor: cursor_window(cursor, timedelta(0)))
            assert started == ["active_lessons", "categories", "groups"]  # the incremental stream first
            deadline = time.monotonic() + 60
            while not _files(lake):  # the fetches write their loads' parts while no step waits for them
                assert time.monotonic() < deadline, "no part was written in the background"
                time.sleep(0.05)
            client = run.client
        with run_fetches("run-1", settings) as again:  # a later step of the run gets the same client
            assert again.client is client
        assert take_prefetched("run-1", "answers") is None  # the answers are never fetched ahead

        cancelled = close_run("run-1")  # what the executor does when the run ends
        closed = time.monotonic()
        assert set(cancelled) <= {"active_lessons", "categories", "groups"} and "active_lessons" in cancelled
        time.sleep(0.5)
        assert max(r.arrived for r in sim.request_log()) < closed  # stopped: no request after the run's end
        assert [p for p in _files(lake) if "_loads" not in p.parts] == []  # every uncommitted part discarded
        assert list_manifests(lake) == []
        assert take_prefetched("run-1", "groups") is None


def test_every_fetching_step_of_the_nightly_job_but_the_answers_is_fetched_ahead(tmp_path: Path) -> None:
    """The planner names steps by their real keys: each stream whose window is known before any commit (the
    active lessons and every snapshot) is started by the run's first step; the answers wait for a commit."""
    from dagster._core.execution.api import create_execution_plan

    from pipeline.contract.streams import SNAPSHOT_STREAMS
    from pipeline.defs.code_location import build_definitions
    from pipeline.prefetch.plan import stream_of_step

    job = build_definitions(Settings(data_dir=str(tmp_path))).resolve_job_def("nightly_sync")
    steps = create_execution_plan(job).step_keys_to_execute
    assert {stream_of_step(step) for step in steps} - {None} == {"active_lessons", *SNAPSHOT_STREAMS}
    assert stream_of_step("answers") is None


def test_an_answers_plan_fetched_ahead_and_never_taken_removes_its_spilled_window(tmp_path: Path) -> None:
    """The active-lessons step plans the answers into a spilled file (answers_ahead.py); a run that ends before
    the answers step took them cancels the fetch, and the file goes with it."""
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=5, concurrency=2, data_dir=str(tmp_path))
        warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
        warehouse.ensure_tables([*TABLES.values(), VERSIONS])
        window = Window(since=None, until=None, moves_cursor=True, label="incremental")
        with run_fetches("run-2", settings) as run:
            spill = ExitStack()
            lessons = spill.enter_context(spill_window_active_lessons(warehouse, window, only_changed=False))
            add_prefetched(
                "run-2",
                BackgroundFetch(
                    warehouse,
                    run.client,
                    "categories",
                    "run-2",
                    window,
                    None,
                    run.client.iter_stream("categories"),
                    plan=AnswersPlan(window, lessons, spill),
                ),
            )
            assert lessons.path.exists()
        assert close_run("run-2") == ["categories"]
        assert not lessons.path.exists()
