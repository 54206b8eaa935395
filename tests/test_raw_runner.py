"""The raw sync's runner (pipeline/raw/runner.py) against the simulator over HTTP and a real lake: every stream of the
run fetched at once through one client; a run stopped before its commits stops its fetches and leaves nothing in the
lake, the answers' spilled plan included; a stream that fails costs only itself, but a token that cannot be had fails
every stream at once, within one retry budget; every raw table belongs to exactly one stream."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.contract.tables import TABLES
from pipeline.defs.code_location import build_definitions
from pipeline.raw.runner import STREAM_TABLES, RawRun, RawSync, streams_of
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.decoding import Batch
from pipeline.source.errors import PlatformUnreachableError
from pipeline.warehouse import Warehouse
from pipeline.warehouse.lake.lake import list_manifests
from simulator import SimulatorConfig, start_simulator

log = logging.getLogger("lessonsync.test")


def _files(lake: Path) -> list[Path]:
    return [p for p in lake.rglob("*") if p.is_file() and "_loads" not in p.parts]


def test_a_run_stopped_before_its_commits_stops_every_fetch_and_leaves_nothing(tmp_path: Path) -> None:
    with start_simulator(SimulatorConfig(seed=42, scale="tiny", faults="latency_ms=100")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=5, concurrency=2, data_dir=str(tmp_path))
        lake = tmp_path / "lake"
        warehouse = Warehouse(tmp_path / "warehouse.duckdb", lake, row_group_rows=5)  # parts on disk at once
        sync = RawSync(warehouse, settings, log, RawRun("run-1"))
        commits = sync.run(["active_lessons", "answers", "groups", "categories"])
        first = next(commits)  # the first stream to end commits while the others are still fetched
        assert first.stream in {"categories", "groups", "active_lessons"}
        deadline = time.monotonic() + 60
        while not [p for p in _files(lake) if not p.is_relative_to(lake / first.stream)]:
            assert time.monotonic() < deadline, "no other stream wrote a part in the background"
            time.sleep(0.05)
        commits.close()  # what Dagster does to a step it stops
        closed = time.monotonic()
        time.sleep(0.5)
        assert max(r.arrived for r in sim.request_log()) < closed  # stopped: no request after the run's end
        manifests = list_manifests(lake)
        assert len(manifests) == 1 and f"-{first.stream}-" in str(manifests[0][1])
        # every uncommitted part discarded, the answers' spilled window too (in the warehouse's temp directory)
        kept = [lake / table for table in STREAM_TABLES[first.stream]]
        assert [p for p in _files(lake) if not any(p.is_relative_to(d) for d in kept)] == []
        assert not list(tmp_path.glob("warehouse.duckdb.tmp/answers-window-*"))


def test_every_raw_table_belongs_to_one_stream_and_is_a_spec_of_the_raw_sync(tmp_path: Path) -> None:
    tables = [t for filled in STREAM_TABLES.values() for t in filled]
    assert len(tables) == len(set(tables))
    assert set(tables) == {name for name in TABLES if name != "quarantine" and not name.startswith("certificate")}
    raw = build_definitions(Settings(data_dir=str(tmp_path))).resolve_assets_def(["lms", "answers"])
    assert raw.can_subset and {k.path[-1] for k in raw.keys} == set(tables)
    assert streams_of(["users", "answer_results"]) == ["answers", "groups"]


def test_a_stream_that_fails_lets_the_others_commit_and_fails_the_run_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream's error (here a categories listing that breaks) costs that stream only: the others commit, then
    the run raises it (the step fails, the alert names the cause)."""
    real = PlatformClient.iter_stream

    def categories_break(client: PlatformClient, name: str, **options: object) -> Iterator[Batch]:
        if name != "categories":
            return real(client, name, **options)  # type: ignore[arg-type]

        def broken() -> Iterator[Batch]:
            raise RuntimeError("categories: the listing broke")
            yield

        return broken()

    monkeypatch.setattr(PlatformClient, "iter_stream", categories_break)
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=20, data_dir=str(tmp_path))
        warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
        committed: list[str] = []
        with pytest.raises(RuntimeError, match="the listing broke"):
            for done in RawSync(warehouse, settings, log, RawRun("run-3")).run(["categories", "lessons", "groups"]):
                committed.append(done.stream)
        assert sorted(committed) == ["groups", "lessons"]
        assert [p for p in _files(tmp_path / "lake") if p.is_relative_to(tmp_path / "lake" / "categories")] == []


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_token_nobody_answers_fails_every_stream_at_once_within_one_budget(tmp_path: Path) -> None:
    """Every stream waits on the token exchange: when it fails for a whole retry budget (nothing listening), every
    stream fails with that one error then, instead of each retrying it for a budget of its own, one after another."""
    budget, port = 4.0, _closed_port()
    settings = Settings(
        base_url=f"http://operator:hunter2@127.0.0.1:{port}",  # a password in the address is never shown
        app_secret="s3cret-app-secret",
        retry_budget=budget,
        retry_max_wait=1.0,
        data_dir=str(tmp_path),
    )
    said = _Said()
    log.addHandler(said)
    warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
    warehouse.ensure_tables(list(TABLES.values()))  # the DuckDB file's first creation is not the platform's time
    started = time.monotonic()
    try:
        with pytest.raises(PlatformUnreachableError) as failure:
            list(RawSync(warehouse, settings, log, RawRun("run-4")).run(list(STREAM_TABLES)))
    finally:
        log.removeHandler(said)
    took = time.monotonic() - started
    assert took <= budget * 1.1, f"the run failed {took:.1f} s after it started, retry budget {budget:.0f} s"
    message = str(failure.value)
    assert message.startswith(f"platform unreachable: POST /v1/token at http://127.0.0.1:{port} failed for "), message
    assert "(connection refused); check LESSONSYNC_BASE_URL" in message and "\n" not in message
    assert not [line for line in said.lines if "hunter2" in line or "s3cret-app-secret" in line]
    assert "hunter2" not in message and "s3cret-app-secret" not in message
    stopped = [line for line in said.lines if "stopped, nothing of them committed" in line]
    assert len(stopped) == 1 and "every stream waits on POST /v1/token" in stopped[0], said.lines
    assert list_manifests(tmp_path / "lake") == []


def test_a_fetch_that_ends_hands_its_buffered_rows_to_the_lake_writers_before_its_commit(tmp_path: Path) -> None:
    """A snapshot smaller than a row group is buffered whole while fetched: its Parquet encoding starts when the
    fetch ends (in the background, beside the commits ahead of it), not when its own commit begins."""
    from pipeline.warehouse import hooks

    lake = tmp_path / "lake"
    spooled_at_end: dict[str, list[Path]] = {}

    def at(point: str) -> None:
        if point.startswith("fetch_ended:"):
            stream = point.split(":", 1)[1]
            tables = [lake / table for table in STREAM_TABLES[stream]]
            spooled_at_end[stream] = [p for table in tables if table.exists() for p in table.rglob(".part-*.tmp")]

    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=20, data_dir=str(tmp_path))
        warehouse = Warehouse(tmp_path / "warehouse.duckdb", lake)  # row groups of 61,440 rows: more than tiny's
        hooks.on_point(at)
        try:
            done = {d.stream: d for d in RawSync(warehouse, settings, log, RawRun("run-4")).run(["lessons", "groups"])}
        finally:
            hooks.on_point(None)
    assert set(spooled_at_end) == {"lessons", "groups"}
    for stream, spooled in spooled_at_end.items():
        assert spooled, f"{stream}: no part was being written when its fetch ended"
        assert sum(done[stream].result.tables[t].inserted for t in STREAM_TABLES[stream]) > 0
