"""The Iceberg data files a first load wrote while fetched (pipeline/warehouse/lake/first_load_files.py) are taken
only while the warehouse table holds exactly their rows; otherwise they are deleted and the mirror writes the table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from pipeline.warehouse.lake.first_load_files import FirstLoadFiles, discard, offer, take

LOADED_AT = datetime(2026, 11, 2, tzinfo=UTC)
COLUMNS = ("id", "first_loaded_at", "deleted_at", "status")


@pytest.fixture
def warehouse(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    conn.execute("CREATE SCHEMA lms")
    conn.execute(
        "CREATE TABLE lms.answers (id BIGINT, first_loaded_at TIMESTAMPTZ, last_loaded_at TIMESTAMPTZ, "
        "deleted_at TIMESTAMPTZ)"
    )
    conn.execute("INSERT INTO lms.answers SELECT range, $at, $at, NULL FROM range(3)", {"at": LOADED_AT})
    return conn


def offered(tmp_path: Path, rows: int = 3, columns: tuple[str, ...] = COLUMNS) -> FirstLoadFiles:
    directory = tmp_path / "first"
    directory.mkdir()
    (directory / "data_0.parquet").write_bytes(b"PAR1")
    files = FirstLoadFiles("answers", directory, (directory / "data_0.parquet",), rows, columns, LOADED_AT)
    offer(tmp_path / "warehouse.duckdb", files)
    return files


def test_the_files_of_the_rows_the_table_holds_are_taken_once(warehouse, tmp_path):
    files = offered(tmp_path)
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) == files
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None  # taken: no longer offered
    assert files.directory.is_dir()  # the taker's now


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE lms.answers SET last_loaded_at = last_loaded_at + INTERVAL 1 HOUR WHERE id = 1",  # touched since
        "INSERT INTO lms.answers VALUES (9, now(), now(), NULL)",  # another load's row
        "UPDATE lms.answers SET deleted_at = now() WHERE id = 2",  # deleted since
    ],
)
def test_files_that_are_not_the_tables_rows_are_deleted_not_taken(warehouse, tmp_path, change):
    files = offered(tmp_path)
    warehouse.execute(change)
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None
    assert not files.directory.exists()


def test_files_of_other_columns_or_rows_or_gone_are_deleted_not_taken(warehouse, tmp_path):
    files = offered(tmp_path, columns=COLUMNS[:-1])
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None and not files.directory.exists()
    files = offered(tmp_path, rows=2)
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None and not files.directory.exists()
    files = offered(tmp_path)
    files.files[0].unlink()
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None and not files.directory.exists()


def test_files_no_mirror_took_are_deleted_when_discarded_or_offered_again(warehouse, tmp_path):
    first = offered(tmp_path)
    second = FirstLoadFiles("answers", tmp_path / "second", (), 3, COLUMNS, LOADED_AT + timedelta(hours=1))
    second.directory.mkdir()
    offer(tmp_path / "warehouse.duckdb", second)
    assert not first.directory.exists()  # replaced
    discard(tmp_path / "warehouse.duckdb")
    assert not second.directory.exists()
    assert take(warehouse, "answers", COLUMNS, deleted_at=True) is None
