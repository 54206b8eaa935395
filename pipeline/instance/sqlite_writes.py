"""Dagster's SQLite storage written without a disk round trip per event, while this process executes a run.

Dagster's SQLite event log opens a connection for every event it stores (two or three for an asset or check event:
the run's shard, then the index shard), commits and closes it. In WAL mode the commit syncs the WAL to disk, and
closing the last connection to a database checkpoints the WAL into it and deletes it: ~1 ms per connection, several
per event, and a run writes hundreds of events on its one thread.

Within `sqlite_writes_kept_open()`, a database in WAL mode that an engine of this process connects to (Dagster's
runs, event log shards, schedules) gets one idle connection of ours, held until the block ends: Dagster's closes are
then never the last, and SQLite checkpoints only when the WAL reaches 1,000 pages, and once at the end. Dagster's
connections there commit with `synchronous=NORMAL`, SQLite's documented setting for WAL: a commit survives the
process crashing; a power loss can undo the last commits, never corrupt the file. Other databases (not in WAL mode,
PostgreSQL) are left as Dagster opens them.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

log = logging.getLogger(__name__)
_lock = threading.Lock()
_blocks = 0  # the sqlite_writes_kept_open blocks open in this process; the listener acts while any is
_held: dict[str, sqlite3.Connection] = {}  # database file -> our idle connection to it


@contextmanager
def sqlite_writes_kept_open() -> Iterator[None]:
    """Within the block, Dagster's SQLite databases in WAL mode are held open and committed to without a sync
    (module docstring); at its end our connections close, and the last close checkpoints each WAL."""
    global _blocks
    with _lock:
        _blocks += 1
    try:
        yield
    finally:
        closing: list[sqlite3.Connection] = []
        with _lock:
            _blocks -= 1
            if _blocks == 0:
                closing = list(_held.values())
                _held.clear()
        for connection in closing:
            connection.close()


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    if not _blocks or not isinstance(dbapi_connection, sqlite3.Connection):  # outside every block: inert
        return
    try:
        mode = dbapi_connection.execute("PRAGMA journal_mode").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":  # a new database is switched to WAL after this connect
            return
        dbapi_connection.execute("PRAGMA synchronous = NORMAL")
        path = _database_file(dbapi_connection)
        if path is None:
            return
        with _lock:
            if _blocks and path not in _held:
                _held[path] = _idle_connection(path)
    except (sqlite3.Error, ValueError) as error:  # a speed-up only: Dagster's connection works as without it
        log.debug("SQLite database of Dagster's storage not held open: %s", error)


def _database_file(connection: sqlite3.Connection) -> str | None:
    """The file of the connection's main database; None in memory or for a temporary one."""
    for _seq, name, file in connection.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(file) or None
    return None


def _idle_connection(path: str) -> sqlite3.Connection:
    """A connection to the existing file at `path` that has read it once (so SQLite counts it among the WAL's users)
    and holds no transaction: it blocks no reader, writer or checkpoint, in this process or another."""
    connection = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=rw", uri=True, check_same_thread=False)
    connection.execute("PRAGMA schema_version").fetchone()
    return connection


# Listened from import, before any thread connects, and never removed: SQLAlchemy iterates a class-level listener deque
# on every connect, and adding or removing one while another thread (the background Iceberg mirror) connects can fail
# that connect. Outside every block the listener returns at once.
event.listen(Engine, "connect", _on_connect)
