"""The Iceberg mirror in the background of the raw step (pipeline/raw/mirror.py), against the simulator over HTTP
with real DuckDB, Iceberg and Dagster: each stream's tables are brought up as it commits, on a thread of the
`lms_raw` step's process, which goes on after the step has ended; the mirror step `lake/iceberg_tables` then
finds every table current and writes nothing. A failure of the background mirror never fails `lms_raw`, and the
mirror step heals what it left behind."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterEventType, DagsterInstance
from iceberg_helpers import (
    ICEBERG_ENV,
    assert_data_files_hold_the_tables_columns,
    assert_iceberg_equals_warehouse,
)
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.contract.streams import SYNC_STREAMS, stream_tables
from pipeline.raw import runner
from pipeline.settings import Settings, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.sync import SyncReport
from pipeline.verify import compare_warehouse, verified_tables
from pipeline.warehouse import hooks
from pipeline.warehouse.loading import early_insert

pytestmark = pytest.mark.slow

MIRROR_STEP = "lake/iceberg_tables"
STREAMS_ONLY = tuple(f"key:lms/{table}" for table in stream_tables())  # no certificates: nothing loads after lms_raw
WORKER_THREAD = "lessonsync-iceberg-mirror"
KILL_WORKER = Path(__file__).with_name("sync_kill_worker.py")


def settings_of(stack: Stack) -> Settings:
    with environment(stack.run_env()):
        return load_settings()


def assert_streams_equal_the_platform(stack: Stack) -> None:
    """The stream tables (the certificates are not selected here) equal the simulator's records."""
    tables = [table for table in verified_tables() if table in stream_tables()]
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        unequal = [d.summary() for d in compare_warehouse(conn, stack.sim, tables) if not d.equal]
    assert not unequal, "warehouse differs from the platform:\n" + "\n".join(unequal)


def mirror_step(report: SyncReport) -> dict[str, object]:
    assert report.success, report.error
    assert {f"lms/{table}" for table in stream_tables()} <= set(report.materializations)
    return report.materializations[MIRROR_STEP]


def step_ended_at(instance: DagsterInstance, run_id: str, step_key: str) -> float:
    ends = [
        record.timestamp
        for record in instance.all_logs(run_id, of_type=DagsterEventType.STEP_SUCCESS)
        if record.step_key == step_key
    ]
    assert len(ends) == 1
    return ends[0]


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    hooks.on_point(listener)
    try:
        yield
    finally:
        hooks.on_point(None)


def test_each_stream_is_mirrored_in_the_background_and_the_mirror_step_then_writes_nothing(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        # The background mirror holds after its first stream until a later step waits for it: the raw step never
        # does, so it ends while the mirror still has every other stream's tables to bring up. A wait counts from
        # the first commit on (the worker's own wait for a previous worker comes before it), even when it comes
        # before the hold: a mirror thread starved on a loaded machine may reach its first table only then.
        committed, awaited, held, mirrored_by = threading.Event(), threading.Event(), threading.Event(), set()

        def hold_until_awaited(point: str) -> None:
            if point == "committed":
                committed.set()
            elif point.startswith("background_mirrored:"):
                mirrored_by.add(threading.current_thread().name)
                if not held.is_set():
                    held.set()
                    assert awaited.wait(60), "the background mirror was never waited for"
            elif point == "background_mirror_awaited" and committed.is_set():  # a step after lms_raw waits for it
                awaited.set()

        instance = DagsterInstance.ephemeral()
        with listening(hold_until_awaited):
            full = stack.sync(select=STREAMS_ONLY, instance=instance)
        step = mirror_step(full)
        assert mirrored_by == {WORKER_THREAD}
        assert step["tables_written"] == [], step  # every table was current when the mirror step ran
        assert set(step["background_tables_written"]) >= {f"lms.{table}" for table in stream_tables()}
        assert step["background_failed"] == {}
        assert step["background_finished_at"] > step_ended_at(instance, full.run_id, "lms_raw")
        assert_streams_equal_the_platform(stack)
        rows = assert_iceberg_equals_warehouse(settings_of(stack))
        assert rows["answers"] > 0 and rows["active_lessons"] > 0

        stack.advance(hours=24)
        incremental = mirror_step(stack.sync(select=STREAMS_ONLY))
        assert incremental["tables_written"] == [], incremental
        assert {"lms.active_lessons", "lms.answers"} <= set(incremental["background_tables_written"])
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))


def test_the_webhook_tables_checks_read_beside_the_background_mirror_without_waiting_for_it(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        # The background mirror holds after its first table until a step pauses it: check_certificates, which runs
        # after lms_raw and only reads. Had it waited for the whole mirror, the two would wait for each other. A
        # pause before the hold counts too (a mirror thread starved on a loaded machine reaches its first table
        # late); only a step of this run pauses it, as only this run's worker is registered for the warehouse.
        paused, held = threading.Event(), threading.Event()

        def hold_until_paused(point: str) -> None:
            if point.startswith("background_mirrored:") and not held.is_set():
                held.set()
                assert paused.wait(60), "no step paused the background mirror"
            elif point == "background_mirror_paused":
                paused.set()

        instance = DagsterInstance.ephemeral()
        with listening(hold_until_paused):
            report = stack.sync(instance=instance)
        assert report.success, report.error
        step = report.materializations[MIRROR_STEP]
        assert step["background_failed"] == {}, step
        assert step_ended_at(instance, report.run_id, "check_certificates") < step["background_finished_at"]
        assert_warehouse_equals_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))


def test_a_failing_background_mirror_never_fails_the_raw_step_and_the_mirror_step_heals_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        catalog = settings_of(stack).data_dir / "iceberg_catalog.sqlite3"
        garbage = b"this is not a SQLite database\n" * 100
        damaged = threading.Event()

        def damage_the_catalog_mid_run(point: str) -> None:  # after the first stream's tables, in the background
            if point.startswith("background_mirrored:") and not damaged.is_set():
                damaged.set()
                catalog.write_bytes(garbage)

        with caplog.at_level(logging.WARNING, logger="lessonsync.mirror"), listening(damage_the_catalog_mid_run):
            report = stack.sync(select=STREAMS_ONLY)
        assert damaged.is_set()
        step = mirror_step(report)  # lms_raw succeeded: every stream's tables materialized
        assert "catalog" in step["background_failed"], step
        assert any("background Iceberg mirror" in r.message and r.levelno == logging.WARNING for r in caplog.records)
        assert step["failed"] == {} and step["tables_written"], step  # healed by the mirror step, in this run
        kept = [p for p in catalog.parent.iterdir() if p.name.startswith("iceberg_catalog.sqlite3.unreadable-")]
        assert [p.read_bytes() for p in kept] == [garbage]
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))


def test_an_unexpected_error_on_the_mirror_thread_is_the_mirror_steps_warning_never_the_raw_steps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)

        def fail_on_the_mirror_thread(point: str) -> None:  # outside any table's own handling
            if point.startswith("background_mirrored:"):
                raise RuntimeError("unexpected")

        with caplog.at_level(logging.WARNING, logger="lessonsync.mirror"), listening(fail_on_the_mirror_thread):
            report = stack.sync(select=STREAMS_ONLY)
        step = mirror_step(report)  # lms_raw succeeded: every stream's tables materialized
        assert step["background_failed"] == {"remaining tables": "RuntimeError: unexpected"}, step
        assert step["failed"] == {} and step["tables_written"], step  # the mirror step brought up the rest
        assert any("remaining tables not brought up (RuntimeError: unexpected)" in r.message for r in caplog.records)
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))


@pytest.mark.parametrize("planned", ["small", "large"])
def test_the_background_mirror_runs_beside_a_small_plans_fetch_and_after_a_large_ones_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planned: str
) -> None:
    if planned == "large":  # above its overlap_max_rows: planned from the committed active lessons, no early insert
        answers = SYNC_STREAMS["answers"]
        assert answers.planned is not None
        monkeypatch.setitem(
            SYNC_STREAMS, "answers", replace(answers, planned=replace(answers.planned, overlap_max_rows=0))
        )
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        # The answers' fetch is held at its end until a table is mirrored (the active lessons' are queued by then),
        # for a bounded time: a large plan's fetch ends without a mirror write beside it.
        mirrored, beside_the_fetch = threading.Event(), []

        def hold_the_answers_fetch(point: str) -> None:
            if point.startswith("background_mirrored:"):
                mirrored.set()
            elif point == "fetch_ended:answers":
                beside_the_fetch.append(mirrored.wait(30 if planned == "small" else 5))

        with listening(hold_the_answers_fetch):
            step = mirror_step(stack.sync(select=STREAMS_ONLY))
        assert beside_the_fetch == [planned == "small"]
        assert step["tables_written"] == [] and step["background_failed"] == {}, step
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))


def test_a_sync_killed_while_the_background_mirror_writes_is_healed_by_the_next(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        home = tmp_path / "dagster_home"
        home.mkdir()
        env = {**os.environ, **stack.run_env(), "DAGSTER_HOME": str(home), "PYTHONPATH": str(KILL_WORKER.parents[2])}
        # killed once the background mirror has brought up its first table and before it records it, the answers
        # still fetching (held at their fetch's end): a state of the raw step with loads both made and not yet made
        killed = subprocess.run(
            [sys.executable, str(KILL_WORKER), "iceberg_committed:1", "--select", *RAW],
            env={**env, "HOLD_AT": "fetch_ended:answers"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            committed = {stream for (stream,) in conn.execute("SELECT DISTINCT stream FROM lms._load_runs").fetchall()}
        assert "active_lessons" in committed and "answers" not in committed, committed
        settings = settings_of(stack)
        assert any((settings.lake_dir / "iceberg").rglob("*.metadata.json")), "no Iceberg table written before the kill"

        rerun = stack.sync(instance=DagsterInstance.ephemeral(), select=RAW)
        assert rerun.success, rerun.error
        assert_warehouse_equals_platform(stack)
        assert_iceberg_equals_warehouse(settings)


@pytest.mark.parametrize("inserted", [True, False], ids=["inserted_while_fetched", "too_large_to_insert"])
def test_a_first_load_written_while_fetched_is_the_iceberg_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inserted: bool
) -> None:
    """A first load inserted while fetched (early_insert.py; here parts of 300 rows, the answers' fetch held at its
    end until a part was written) writes its rows as the Iceberg mirror's data files too: the mirror takes them for
    the tables' first snapshots instead of writing the tables again. So does a load too large to insert beside its
    fetch, whose parts are inserted at the commit. Their files hold the table's columns as the mirror writes them from
    the warehouse, so the next sync's mirror compares its changes with them."""
    with first_load_inserted_while_fetched(tmp_path, monkeypatch, inserted=inserted) as (stack, full, taken):
        assert taken == {"answers", "answer_results"}
        assert_data_files_hold_the_tables_columns(settings_of(stack), ("answers", "answer_results"))
        staging = settings_of(stack).duckdb_temp_directory or Path(f"{stack.warehouse_path}.tmp")
        assert not list(staging.glob("lessonsync-iceberg-*"))  # every file written while fetched was taken

        stack.advance(hours=24)
        incremental = stack.sync(select=STREAMS_ONLY)
        assert incremental.success, incremental.error
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))
        assert_data_files_hold_the_tables_columns(settings_of(stack), ("answers", "answer_results"))


def test_a_failure_writing_the_first_loads_iceberg_files_leaves_the_load_and_the_mirror_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing the mirror's files while fetched is a bulkhead: when it fails, the parts still go in early, the load
    commits, and the mirror writes the tables from the warehouse as it does for any other load."""

    def failing(*_args: object, **_kwargs: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(early_insert, "write_first_load_files", failing)
    with first_load_inserted_while_fetched(tmp_path, monkeypatch) as (_stack, _full, taken):
        assert taken == set()


@contextmanager
def first_load_inserted_while_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, inserted: bool = True
) -> Iterator[tuple[Stack, SyncReport, set[str]]]:
    """A full sync of the streams, Iceberg on, whose answers go in while fetched (parts of 300 rows, their fetch held
    at its end until a part was written), exact in the warehouse and in Iceberg; with the tables whose files written
    while fetched the mirror took. Not `inserted`: the answers' plan is above their overlap_max_rows, so their parts
    are only written as the mirror's files while fetched and inserted at the commit."""
    monkeypatch.setattr(runner, "EARLY_PART_ROWS", 300)
    if not inserted:
        answers = SYNC_STREAMS["answers"]
        assert answers.planned is not None
        monkeypatch.setitem(
            SYNC_STREAMS, "answers", replace(answers, planned=replace(answers.planned, overlap_max_rows=0))
        )
    written, taken = threading.Event(), set()

    def hold_answers_parts(point: str) -> None:
        if point.startswith("early_inserted:"):
            written.set()
        elif point == "fetch_ended:answers":  # in the fetch's thread, before its step can see it ended
            written.wait(timeout=30)
        elif point.startswith("first_load_files_taken:"):
            taken.add(point.split(":", 1)[1])

    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=5", page_size=20) as stack:
        stack.env.update(ICEBERG_ENV)
        with listening(hold_answers_parts):
            full = stack.sync(select=STREAMS_ONLY)
        assert full.success, full.error
        assert written.is_set()
        assert (full.materializations["lms/answers"].get("rows_inserted_while_fetching", 0) > 0) == inserted
        assert_streams_equal_the_platform(stack)
        assert_iceberg_equals_warehouse(settings_of(stack))
        yield stack, full, taken
