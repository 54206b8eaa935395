"""Opening the DuckDB file: resource limits so big merges spill to disk instead of running out of memory,
UTC session time zone, and DuckDB's lock errors turned into WarehouseLockedError."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline.settings_checks import AUTO
from pipeline.warehouse.errors import MemoryLimitError, WarehouseLockedError, WarehouseMissingError

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<exe>.*?) \(PID (?P<pid>\d+)\)")
_LOCK_POLL_SECONDS = 0.2
LOCK_REPORT_EVERY_SECONDS = 30.0
# The storage format a new warehouse file is written in: the analysts' snapshot is a byte copy of it, and DuckDB
# 1.4 (the oldest the README promises; the DuckDB CLI, DBeaver and BI drivers lag the Python package) cannot open
# the v2.0.0 format DuckDB 2 writes by default. A file keeps the format it was created with.
STORAGE_COMPATIBILITY_VERSION = "v1.4.0"
# An analyst's query on the warehouse file (read-only: DuckDB then refuses any writer) or a rebuild outlasts
# seconds; a nightly run waits minutes for it rather than failing (pipeline.settings.Settings.duckdb_lock_timeout).
DEFAULT_LOCK_TIMEOUT = 600.0
log = logging.getLogger("lessonsync.warehouse")
MIB = 1024 * 1024
# DuckDB 2.0 needs "a minimum of 125 MB of memory per thread" (duckdb.org/docs/2.0/guides/performance/environment):
# 119.2 MiB. Every MiB above it only holds cached blocks, resident on top of the sync's fetch.
MEMORY_PER_THREAD = 120 * MIB
MEMORY_FLOOR = 240 * MIB  # also holds a stage's temp tables (in memory, uncompressed) beside the statement at work
AVAILABLE_SHARE = 0.25  # never more than this share of the memory available when the warehouse is opened
DEFAULT_MEMORY_LIMIT = AUTO  # pipeline.settings.DEFAULT_MEMORY_LIMIT: memory_limit_for_machine()


@dataclass(frozen=True)
class ConnectionSettings:
    """DuckDB limits for every connection to one warehouse file."""

    memory_limit: str = DEFAULT_MEMORY_LIMIT  # DuckDB syntax ("2GB", "512MiB") or "auto", every connection's
    temp_directory: Path | None = None  # None: "<warehouse file>.tmp/" next to the file
    threads: int | None = None  # None: DuckDB's default (all cores)
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT  # seconds to keep retrying while another process holds the file

    def __post_init__(self) -> None:
        if self.memory_limit.strip().lower() == AUTO:  # resolved once: every connection the same
            object.__setattr__(self, "memory_limit", memory_limit_for_machine(self.threads))

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


def memory_limit_for_machine(threads: int | None = None) -> str:
    """DuckDB's documented minimum per thread (all cores unless `threads`), at least MEMORY_FLOOR, at most
    AVAILABLE_SHARE of the available memory unless that is below the floor. A limit DuckDB can work within
    spills beyond it; more than it needs only fills with cached blocks and raises the process's peak RSS."""
    wanted = MEMORY_PER_THREAD * (threads or _cores())
    available = available_memory()
    if available is not None:
        wanted = min(wanted, int(available * AVAILABLE_SHARE))
    return f"{max(MEMORY_FLOOR, wanted) // MIB}MiB"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (containers, taskset)
    except AttributeError:
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes the kernel reports available (MemAvailable), lowered to the room left under a cgroup v2 limit;
    None where neither can be read (not Linux)."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(0, min(found)) if found else None


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


@contextmanager
def out_of_memory_named(conn: duckdb.DuckDBPyConnection, where: str) -> Iterator[None]:
    """DuckDB running out of memory within becomes a MemoryLimitError saying `where` ("committing stream
    answers"), the limit and what to do, in one line instead of DuckDB's generic advice."""
    try:
        yield
    except duckdb.OutOfMemoryException:
        raise MemoryLimitError(where, memory_limit(conn)) from None


def memory_limit(conn: duckdb.DuckDBPyConnection) -> str | None:
    """The database's memory_limit ("160.0 MiB"), asked on a cursor of its own: `conn`'s transaction may be
    aborted (by the error being reported); None if it cannot be read."""
    try:
        return str(scalar(conn.cursor(), "SELECT current_setting('memory_limit')")).replace(".0 ", "")
    except duckdb.Error:
        return None


def database_file(conn: duckdb.DuckDBPyConnection) -> str:
    """The file of the database `conn` is on ("" in memory), asked on a cursor of its own: `conn` may be streaming
    a result."""
    with conn.cursor() as cursor:
        row = cursor.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return str(row[0]) if row is not None and row[0] else ""


_DUCKDB_SIZE_UNITS = {"bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50}


def memory_limit_bytes(conn: duckdb.DuckDBPyConnection) -> int | None:
    """The connection's memory_limit in bytes; None when DuckDB reports it in a form not known here."""
    text = str(scalar(conn, "SELECT current_setting('memory_limit')"))
    number, _, unit = text.strip().partition(" ")
    try:
        return int(float(number) * _DUCKDB_SIZE_UNITS[unit.lower()])
    except (ValueError, KeyError):
        return None


def repeats_any(
    conn: duckdb.DuckDBPyConnection,
    expression: str,
    rows: str,
    params: Sequence[object] | Mapping[str, object] | None = None,
) -> bool:
    """Whether some value of `expression` (a 64-bit hash of a key, usually) occurs twice among `rows` (a relation
    or subquery). Grouped, not counted distinct: DuckDB's grouping spills to disk past the memory limit, a
    distinct count's hash table does not (it ran out of memory over the ~10M answers of scale large at 256MiB)."""
    grouped = f"SELECT 1 FROM (SELECT {expression} AS v FROM {rows}) GROUP BY v HAVING count(*) > 1 LIMIT 1"
    return bool(conn.execute(grouped, params if params is not None else []).fetchall())


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
