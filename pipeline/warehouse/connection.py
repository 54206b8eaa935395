"""Opening the DuckDB file: resource limits so big merges spill to disk instead of running out of memory,
UTC session time zone, and DuckDB's lock errors turned into WarehouseLockedError."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline.warehouse.errors import WarehouseLockedError, WarehouseMissingError

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<exe>.*?) \(PID (?P<pid>\d+)\)")
_LOCK_POLL_SECONDS = 0.2
LOCK_REPORT_EVERY_SECONDS = 30.0
DEFAULT_MEMORY_LIMIT = "160MiB"  # pipeline.settings.DEFAULT_MEMORY_LIMIT: why
# The storage format a new warehouse file is written in: the analysts' snapshot is a byte copy of it, and DuckDB
# 1.4 (the oldest the README promises; the DuckDB CLI, DBeaver and BI drivers lag the Python package) cannot open
# the v2.0.0 format DuckDB 2 writes by default. A file keeps the format it was created with.
STORAGE_COMPATIBILITY_VERSION = "v1.4.0"
# An analyst's query on the warehouse file (read-only: DuckDB then refuses any writer) or a rebuild outlasts
# seconds; a nightly run waits minutes for it rather than failing (pipeline.settings.Settings.duckdb_lock_timeout).
DEFAULT_LOCK_TIMEOUT = 600.0
log = logging.getLogger("lessonsync.warehouse")


@dataclass(frozen=True)
class ConnectionSettings:
    """DuckDB limits for every connection to one warehouse file."""

    memory_limit: str = DEFAULT_MEMORY_LIMIT  # DuckDB syntax ("2GB", "512MiB"), every connection's
    temp_directory: Path | None = None  # None: "<warehouse file>.tmp/" next to the file
    threads: int | None = None  # None: DuckDB's default (all cores)
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT  # seconds to keep retrying while another process holds the file

    def duckdb_config(self, path: Path) -> dict[str, str | bool | int | float | list[str]]:
        temp = self.temp_directory or path.with_name(path.name + ".tmp")
        # jemalloc's background threads hand DuckDB's freed memory back to the OS within seconds of a big statement;
        # without them it stays resident and adds up with the answers' fetch that runs beside the later commits
        config: dict[str, str | bool | int | float | list[str]] = {
            "memory_limit": self.memory_limit,
            "temp_directory": str(temp),
            "allocator_background_threads": True,
            "storage_compatibility_version": STORAGE_COMPATIBILITY_VERSION,
        }
        if self.threads is not None:
            config["threads"] = self.threads
        return config


def open_connection(path: Path, settings: ConnectionSettings, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to `path`, waiting up to `settings.lock_timeout` for another process to let go of it."""
    if read_only and not path.exists():
        raise WarehouseMissingError(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + settings.lock_timeout
    next_report = started + LOCK_REPORT_EVERY_SECONDS
    while True:
        try:
            conn = _connect(path, settings, read_only)
            break
        except duckdb.IOException as error:
            holder = lock_holder(str(error))
            if holder is None:
                raise
            now = time.monotonic()
            if now >= deadline:
                raise WarehouseLockedError(path, holder) from None
            if now >= next_report:
                next_report = now + LOCK_REPORT_EVERY_SECONDS
                log.warning(
                    "waiting for %s to release warehouse %s: %.0f s so far, giving up after %.0f s "
                    "(LESSONSYNC_DUCKDB_LOCK_TIMEOUT); analysts read analytics.duckdb, not the warehouse",
                    holder,
                    path,
                    now - started,
                    settings.lock_timeout,
                )
            time.sleep(_LOCK_POLL_SECONDS)
    conn.execute("SET TimeZone = 'UTC'")  # TIMESTAMPTZ values come back in UTC whatever the machine's zone
    return conn


def _connect(path: Path, settings: ConnectionSettings, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only, config=settings.duckdb_config(path))
    except duckdb.ConnectionException as error:
        # DuckDB shares one database instance per file inside a process and refuses a second, differently
        # configured one: a read-only request while this process already writes the file gets a connection
        # to the instance that is open (it sees the same committed data).
        if read_only and "different configuration" in str(error):
            return duckdb.connect(str(path), read_only=False, config=settings.duckdb_config(path))
        raise


def lock_holder(message: str) -> str | None:
    """'PID 123 (/usr/bin/python3)' when `message` is DuckDB's lock conflict, else None."""
    if "Could not set lock on file" not in message:
        return None
    match = _LOCK_HOLDER.search(message)
    return f"PID {match['pid']} ({match['exe']})" if match else "unknown process"


def scalar(
    conn: duckdb.DuckDBPyConnection, query: str, params: Sequence[object] | Mapping[str, object] | None = None
) -> Any:
    """The first value of a query's first row, or None without a row. Reads the whole result (fetchall):
    DuckDB 2 refuses new work on a connection whose last result was left unfinished."""
    rows = conn.execute(query, params if params is not None else []).fetchall()
    return rows[0][0] if rows else None


def repeats_any(
    conn: duckdb.DuckDBPyConnection,
    expression: str,
    rows: str,
    params: Sequence[object] | Mapping[str, object] | None = None,
) -> bool:
    """Whether some value of `expression` (a 64-bit hash of a key, usually) occurs twice among `rows` (a relation
    or subquery). Counting the distinct values is faster in DuckDB than grouping them with HAVING count(*) > 1, in
    the same memory, and answers the usual case (nothing repeats) at once."""
    return not scalar(conn, f"SELECT count(*) = count(DISTINCT {expression}) FROM {rows}", params)


@contextmanager
def insertion_order_not_kept(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Statements within may write rows in any order, which lets DuckDB write them on every core: for rows whose
    order nothing reads (a first load, a view's copy)."""
    conn.execute("SET preserve_insertion_order = false")
    try:
        yield
    finally:
        # a statement within may have failed and aborted the transaction, which takes no statement until its
        # rollback: that error is the one to raise; the setting left off only lets later rows go in any order
        with suppress(duckdb.TransactionException):
            conn.execute("RESET preserve_insertion_order")
