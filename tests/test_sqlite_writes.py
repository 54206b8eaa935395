"""Dagster's SQLite storage held open while a run executes (pipeline/instance/sqlite_writes.py): real SQLite files,
SQLAlchemy engines as Dagster makes them (NullPool), and a real run on a SQLite instance."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from pathlib import Path

from dagster import (
    AssetCheckResult,
    DagsterEventType,
    asset,
    asset_check,
    instance_for_test,
    materialize,
)
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from pipeline.defs.resources import WarehouseResource
from pipeline.instance.sqlite_writes import sqlite_writes_kept_open

FULL, NORMAL = 2, 1  # PRAGMA synchronous


def _database(path: Path, *, wal: bool) -> Path:
    with sqlite3.connect(path) as connection:
        if wal:
            connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, body TEXT)")
    connection.close()
    return path


def _write_like_dagster(path: Path) -> int:
    """One event the way Dagster's SQLite storage writes it: a new engine, one connection, one commit, closed.
    Returns the connection's `synchronous` setting."""
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    with engine.connect() as connection, connection.begin():
        connection.execute(text("INSERT INTO events (body) VALUES ('an event')"))
        synchronous = int(connection.execute(text("PRAGMA synchronous")).scalar_one())
    engine.dispose()
    return synchronous


def _open_in_this_process(path: Path) -> bool:
    return any(os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve()) for fd in os.listdir("/proc/self/fd"))


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def test_a_wal_database_is_held_open_and_committed_without_a_sync_until_the_block_ends(tmp_path: Path) -> None:
    db = _database(tmp_path / "shard.db", wal=True)
    with sqlite_writes_kept_open():
        assert _write_like_dagster(db) == NORMAL
        assert _write_like_dagster(db) == NORMAL
        # Dagster's connection closed, ours not: the WAL was neither checkpointed nor deleted
        assert _open_in_this_process(db)
        assert _wal(db).exists() and _wal(db).stat().st_size > 0
    assert not _open_in_this_process(db)
    assert not _wal(db).exists(), "the last close checkpoints the WAL into the database and deletes it"
    with sqlite3.connect(db) as reader:
        assert reader.execute("SELECT count(*) FROM events").fetchone() == (2,)
    reader.close()
    # outside the block Dagster's connections are as SQLite makes them
    assert _write_like_dagster(db) == FULL
    assert not _open_in_this_process(db) and not _wal(db).exists()


def test_a_database_not_in_wal_mode_is_left_as_it_is(tmp_path: Path) -> None:
    db = _database(tmp_path / "rollback.db", wal=False)
    with sqlite_writes_kept_open():
        assert _write_like_dagster(db) == FULL
        assert not _open_in_this_process(db)


def test_nested_blocks_hold_the_database_until_the_outer_one_ends(tmp_path: Path) -> None:
    db = _database(tmp_path / "index.db", wal=True)
    with sqlite_writes_kept_open():
        with sqlite_writes_kept_open():
            _write_like_dagster(db)
        assert _open_in_this_process(db)
        assert _write_like_dagster(db) == NORMAL
    assert not _open_in_this_process(db)
    assert _write_like_dagster(db) == FULL


@asset
def lessons() -> None:
    return None


@asset_check(asset=lessons)
def lessons_have_rows() -> AssetCheckResult:
    return AssetCheckResult(passed=True)


def test_a_run_in_the_block_stores_every_event_and_leaves_no_file_open(tmp_path: Path) -> None:
    with instance_for_test(temp_dir=str(tmp_path)) as instance:
        with sqlite_writes_kept_open():
            result = materialize([lessons, lessons_have_rows], instance=instance)
            held = [p for p in tmp_path.rglob("*.db") if _open_in_this_process(p)]
        assert result.success
        assert any(p.name == f"{result.run_id}.db" for p in held), "the run's event log shard was held open"
        assert not [p for p in tmp_path.rglob("*.db") if _open_in_this_process(p)]
        assert not list(tmp_path.rglob("*.db-wal")), "every WAL checkpointed once the block ended"
        stored = [e.dagster_event.event_type for e in instance.all_logs(result.run_id) if e.dagster_event]
        assert DagsterEventType.ASSET_MATERIALIZATION in stored
        assert DagsterEventType.ASSET_CHECK_EVALUATION in stored
        assert stored[-1] == DagsterEventType.RUN_SUCCESS
        assert instance.get_latest_materialization_event(lessons.key) is not None  # the index shard's copy


@asset
def lessons_in_the_warehouse(context, warehouse: WarehouseResource) -> None:  # type: ignore[no-untyped-def]
    shard = Path(context.instance.root_directory) / "history" / "runs" / f"{context.run.run_id}.db"
    assert _open_in_this_process(shard), "the run's event log shard is held open while its steps execute"


def test_a_run_that_uses_the_warehouse_holds_its_storage_open_until_it_ends(tmp_path: Path) -> None:
    """What a run worker the daemon launches does: the warehouse resource holds the storage for the run."""
    (tmp_path / "home").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        warehouse = WarehouseResource(data_dir=str(tmp_path / "data"))
        result = materialize([lessons_in_the_warehouse], resources={"warehouse": warehouse}, instance=instance)
        assert result.success
        assert not [p for p in (tmp_path / "home").rglob("*.db") if _open_in_this_process(p)]
        assert instance.get_latest_materialization_event(lessons_in_the_warehouse.key) is not None


def test_blocks_opening_and_closing_never_fail_a_connect_on_another_thread(tmp_path: Path) -> None:
    """The background Iceberg mirror connects on its own thread while runs' blocks open and close on others: a connect
    must never meet the listener being added or removed (SQLAlchemy iterates the class-level listeners)."""
    db = _database(tmp_path / "catalog.db", wal=False)
    errors: list[BaseException] = []
    stop = threading.Event()

    def connect_repeatedly() -> None:
        while not stop.is_set():
            engine = create_engine(f"sqlite:///{db}", poolclass=NullPool)
            try:
                with engine.connect() as connection:
                    connection.execute(text("SELECT 1"))
            except BaseException as error:  # noqa: BLE001 - any failure of the connect is what the test looks for
                errors.append(error)
                return
            finally:
                engine.dispose()

    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows: the window is a few bytecodes
    connector = threading.Thread(target=connect_repeatedly)
    connector.start()
    try:
        for _ in range(3000):
            with sqlite_writes_kept_open():
                pass
    finally:
        stop.set()
        connector.join()
        sys.setswitchinterval(switch_interval)
    assert not errors, f"a connect failed while blocks opened and closed: {errors[0]!r}"
    # the listener stays registered, and outside every block a WAL database is left as SQLite opens it
    wal_db = _database(tmp_path / "shard.db", wal=True)
    assert _write_like_dagster(wal_db) == FULL
    assert not _open_in_this_process(wal_db)
