"""The analysts' snapshot takes a raw table's rows from the Iceberg mirror's data files when those hold the table
now, hard-linked instead of encoded a third time (pipeline/analytics/published_files.py). Against the simulator over
HTTP, with real DuckDB and real Iceberg: the links are the mirror's files, the snapshot equals the warehouse after a
first sync and after a day of changes, a table whose rows were loaded again is written as before, and the mirror
losing its files takes nothing from the snapshot."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pytest
from iceberg_helpers import ICEBERG_ENV
from published_helpers import assert_same_raw_tables

from pipeline.analytics import published_files
from pipeline.settings import Settings, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.warehouse.duck.tabledef import SCHEMA

pytestmark = pytest.mark.slow


def settings_of(stack: Stack) -> Settings:
    with environment(stack.run_env()):
        return load_settings()


def synced(stack: Stack) -> Settings:
    report = stack.sync()
    assert report.success, report.error
    return settings_of(stack)


def assert_snapshot_equals_warehouse(settings: Settings) -> None:
    with (
        duckdb.connect(str(settings.warehouse_path), read_only=True) as warehouse,
        duckdb.connect(str(settings.data_dir / "analytics.duckdb"), read_only=True) as snapshot,
    ):
        assert_same_raw_tables(warehouse, snapshot)


def referenced_files(settings: Settings, table: str) -> list[Path]:
    """The files the snapshot's view of lms.<table> reads."""
    with duckdb.connect(str(settings.data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        (sql,) = snapshot.execute(
            "SELECT sql FROM duckdb_views() WHERE schema_name = 'lms' AND view_name = ?", [table]
        ).fetchone() or ("",)
    return sorted({Path(path) for path in re.findall(r"'([^']+\.parquet)'", sql)})


def mirror_inodes(settings: Settings) -> set[int]:
    return {path.stat().st_ino for path in (settings.lake_dir / "iceberg" / SCHEMA).rglob("*.parquet")}


def test_raw_tables_are_published_as_links_to_the_mirrors_files_and_equal_the_warehouse(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        settings = synced(stack)
        assert_snapshot_equals_warehouse(settings)
        inodes = mirror_inodes(settings)
        for table in ("active_lessons", "answers", "answer_results", "groups", "users", "lessons"):
            files = referenced_files(settings, table)
            assert files and all(f.parent.name.endswith(".files") for f in files), (table, files)
            assert all(f.stat().st_ino in inodes for f in files), table  # the mirror's own bytes, not a copy

        # a day later: tables with rows loaded again are written from the warehouse, and the snapshot equals it
        stack.advance(hours=24)
        settings = synced(stack)
        assert_snapshot_equals_warehouse(settings)
        updated = referenced_files(settings, "active_lessons")
        assert updated and not any(f.parent.name.endswith(".files") for f in updated)
        assert all(f.stat().st_nlink == 1 for f in updated)

        # the mirror's files gone (it rewrites a table whose file is missing): the snapshot keeps its own links
        tables = ("answers", "lessons", "lesson_questions", "categories", "groups", "users")
        linked = [f for t in tables for f in referenced_files(settings, t) if f.parent.name.endswith(".files")]
        assert linked  # some table unchanged for the day is still read from its links
        for path in (settings.lake_dir / "iceberg" / SCHEMA).rglob("*.parquet"):
            path.unlink()
        # every other link of those bytes is the snapshot's own (an older snapshot's retired links share them)
        published = Counter(f.stat().st_ino for f in (settings.data_dir / "published").rglob("*.parquet"))
        assert all(f.stat().st_nlink == published[f.stat().st_ino] for f in linked)
        assert_snapshot_equals_warehouse(settings)
        stack.advance(hours=24)
        settings = synced(stack)
        assert_snapshot_equals_warehouse(settings)


def test_a_linked_base_and_the_rows_changed_since_read_as_the_warehouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every table as a base (DELTA_MIN_ROWS 0): the first sync links the bases, the next writes the rows changed
    since beside them; the view reads a linked base's last_loaded_at from first_loaded_at, the delta's as loaded."""
    monkeypatch.setattr(published_files, "DELTA_MIN_ROWS", 0)
    monkeypatch.setattr(published_files, "DELTA_SHARE", 1.0)  # a day of a tiny platform changes many of its rows
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        settings = synced(stack)
        assert all(f.parent.name.endswith(".files") for f in referenced_files(settings, "active_lessons"))
        stack.advance(hours=24)
        settings = synced(stack)
        files = referenced_files(settings, "active_lessons")
        assert any(f.parent.name.endswith(".files") for f in files) and any(".delta-" in f.name for f in files)
        assert_snapshot_equals_warehouse(settings)


def test_a_mirror_file_damaged_in_place_is_not_linked_and_its_rows_are_written(tmp_path: Path) -> None:
    """The published files lost, and a data file of the mirror's lessons damaged in place, its size kept (so the
    mirror's stat of its recorded files sees nothing; only reading it does): the publish does not take the mirror's
    files of that table but writes its rows, and the snapshot equals the warehouse; the other tables are linked
    again."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        settings = synced(stack)
        [damaged] = (settings.lake_dir / "iceberg" / SCHEMA / "lessons" / "data").glob("*.parquet")
        size = damaged.stat().st_size
        damaged.unlink()  # its link in the snapshot keeps the bytes: a new file, not those bytes, is the damage
        damaged.write_bytes(b"not a parquet file".ljust(size, b"\0"))
        shutil.rmtree(settings.data_dir / "published")
        (settings.data_dir / "analytics.duckdb").unlink()
        settings = synced(stack)
        assert_snapshot_equals_warehouse(settings)
        lessons = referenced_files(settings, "lessons")
        assert lessons and not any(f.parent.name.endswith(".files") for f in lessons)
        assert all(f.parent.name.endswith(".files") for f in referenced_files(settings, "answers"))
