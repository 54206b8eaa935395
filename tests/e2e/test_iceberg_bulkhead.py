"""The Iceberg mirror is a bulkhead: whatever happens to the lake's Iceberg tables, the raw loads commit, and the
mirror heals itself from the warehouse on the next run. One test per damage, each against the simulator over
HTTP with real DuckDB and real Iceberg: a catalog overwritten with garbage, a data file deleted, the data directory
moved, a `cp -a` copy of it synced, the catalog held locked by another reader. After the damage the next sync
commits every raw table (the warehouse equals the platform) and the mirror step, in that sync or the next, leaves
every raw table and mart read through pyiceberg equal to the warehouse."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from iceberg_helpers import ICEBERG_ENV, assert_iceberg_equals_warehouse, assert_marts_equal, open_catalog
from stack_helpers import assert_warehouse_equals_platform

from pipeline.analytics.models import load_project
from pipeline.contract.streams import stream_tables
from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES
from pipeline.settings import Settings, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.sync import SyncReport
from pipeline.warehouse import hooks
from pipeline.warehouse.duck.tabledef import SCHEMA
from pipeline.warehouse.lake.iceberg import iceberg_location

pytestmark = pytest.mark.slow

MIRROR_STEP = "lake/iceberg_tables"
LOADED = {f"lms/{name}" for name in (*stream_tables(), CERTIFICATE_EVENTS.name, CERTIFICATES.name)}


def settings_of(stack: Stack) -> Settings:
    with environment(stack.run_env()):
        return load_settings()


@contextmanager
def synced(tmp_path: Path) -> Iterator[Stack]:
    """A tiny platform, synced once with the Iceberg mirror on, then a day of activity (in the inbox too)."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        first = stack.sync()
        assert first.success, first.error
        stack.advance(hours=24)
        yield stack


def assert_every_raw_table_committed(stack: Stack, report: SyncReport) -> None:
    loaded = {key for key in report.materializations if key.startswith("lms/")}
    assert loaded == LOADED, f"not committed: {sorted(LOADED - loaded)}"
    assert_warehouse_equals_platform(stack)


def assert_mirror_equals_warehouse(settings: Settings) -> None:
    assert_iceberg_equals_warehouse(settings)
    assert_marts_equal(settings, [mart.name for mart in load_project(settings.models_dir).marts])
    where = iceberg_location(settings.lake)
    assert where is not None
    catalog = open_catalog(settings)
    for namespace in (SCHEMA, "analytics"):
        for identifier in catalog.list_tables(namespace):
            location = catalog.load_table(identifier).metadata_location
            assert location.startswith(where.location + "/"), f"{identifier} is registered at {location}"


def cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **stack.run_env()}
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def data_files(settings: Settings, table: str) -> list[Path]:
    return sorted((settings.lake_dir / "iceberg" / SCHEMA / table / "data").glob("*.parquet"))


def current_data_file(settings: Settings, identifier: tuple[str, str]) -> Path:
    """A data file of the table's current snapshot."""
    task = next(iter(open_catalog(settings).load_table(identifier).scan().plan_files()))
    return Path(task.file.file_path.removeprefix("file://"))


def test_a_catalog_overwritten_with_garbage_is_set_aside_and_rebuilt(tmp_path):
    with synced(tmp_path) as stack:
        settings = settings_of(stack)
        catalog = settings.data_dir / "iceberg_catalog.sqlite3"
        garbage = b"this is not a SQLite database\n" * 100
        catalog.write_bytes(garbage)

        report = stack.sync()
        assert report.success, report.error  # healed in the same run
        assert_every_raw_table_committed(stack, report)
        assert_mirror_equals_warehouse(settings)
        kept = [p for p in settings.data_dir.iterdir() if p.name.startswith("iceberg_catalog.sqlite3.unreadable-")]
        assert [p.read_bytes() for p in kept] == [garbage], "the unreadable catalog was not kept aside"

        catalog.write_bytes(garbage)  # `lessonsync tables sync` repairs it too, without a sync
        synced_tables = cli(stack, "tables", "sync")
        assert synced_tables.returncode == 0, synced_tables.stderr
        assert "tables sync" not in synced_tables.stdout + synced_tables.stderr  # no advice pointing at itself
        assert_mirror_equals_warehouse(settings)


def test_a_deleted_data_file_makes_its_table_rewritten_whole(tmp_path):
    with synced(tmp_path) as stack:
        settings = settings_of(stack)
        data_files(settings, "answers")[0].unlink()

        report = stack.sync()
        assert_every_raw_table_committed(stack, report)  # groups, lessons, sessions... untouched by the damage
        assert report.success, report.error
        assert_mirror_equals_warehouse(settings)

        # tables no load changes (a sync with nothing new): the files the record lists are stat'ed, so the sync
        # opens and rewrites the raw table and the mart that lost one
        for identifier in (("lms", "lessons"), ("analytics", "certificates")):
            current_data_file(settings, identifier).unlink()
        quiet = stack.sync()
        assert quiet.success, quiet.error
        assert quiet.materializations["lms/lessons"]["rows_inserted"] == 0
        assert_mirror_equals_warehouse(settings)

        # `lessonsync tables maintain` finds and repairs one too (it reads every file, on object storage as well)
        current_data_file(settings, ("lms", "lessons")).unlink()
        maintained = cli(stack, "tables", "maintain")
        assert maintained.returncode == 0, maintained.stderr
        assert "lms.lessons" in maintained.stdout
        assert_mirror_equals_warehouse(settings)


def test_a_moved_data_directory_is_detected_and_the_tables_rewritten_where_they_now_live(tmp_path):
    with synced(tmp_path) as stack:
        moved = tmp_path / "moved"
        (tmp_path / "data").rename(moved)
        stack.data_dir = moved
        stack.env["LESSONSYNC_DATA_DIR"] = str(moved)

        report = stack.sync()
        assert report.success, report.error
        assert_every_raw_table_committed(stack, report)
        assert_mirror_equals_warehouse(settings_of(stack))


def test_a_copy_of_the_data_directory_never_writes_into_the_original(tmp_path):
    with synced(tmp_path) as stack:
        original = tmp_path / "data"
        copy = tmp_path / "copy"
        subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
        before = {p: p.stat().st_mtime_ns for p in (original / "lake" / "iceberg").rglob("*")}
        catalog_before = (original / "iceberg_catalog.sqlite3").read_bytes()
        stack.data_dir = copy
        stack.env["LESSONSYNC_DATA_DIR"] = str(copy)

        report = stack.sync()
        assert report.success, report.error
        assert_every_raw_table_committed(stack, report)
        assert_mirror_equals_warehouse(settings_of(stack))
        after = {p: p.stat().st_mtime_ns for p in (original / "lake" / "iceberg").rglob("*")}
        assert after == before, "the copy's sync wrote into the original's Iceberg tables"
        assert (original / "iceberg_catalog.sqlite3").read_bytes() == catalog_before


def test_a_locked_catalog_is_waited_for_within_a_bound_then_only_the_mirror_step_fails(tmp_path):
    with synced(tmp_path) as stack:
        settings = settings_of(stack)
        reader = sqlite3.connect(settings.data_dir / "iceberg_catalog.sqlite3", check_same_thread=False)
        reader.execute("BEGIN")  # a reader's open transaction: no writer can commit until it ends
        reader.execute("SELECT count(*) FROM iceberg_tables").fetchall()
        try:
            stack.env["LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT"] = "2"
            report = stack.sync()
            assert not report.success
            assert MIRROR_STEP in (report.error or "") and "locked" in (report.error or ""), report.error
            assert_every_raw_table_committed(stack, report)
            assert "analytics/published" in report.materializations  # the marts' mirror failing fails only itself

            # within the bound the lock is waited for: released 2 s after the mirror opens the catalog
            stack.env["LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT"] = "120"
            released = threading.Event()

            def release_soon(point: str) -> None:
                if point == "iceberg_catalog" and not released.is_set():
                    released.set()
                    threading.Timer(2.0, reader.rollback).start()

            hooks.on_point(release_soon)
            try:
                healed = stack.sync()
            finally:
                hooks.on_point(None)
            assert released.is_set()
            assert healed.success, healed.error
            assert_every_raw_table_committed(stack, healed)
            assert_mirror_equals_warehouse(settings)
        finally:
            reader.close()
