"""The warehouse facade the Dagster assets use: one DuckDB file plus its Parquet lake. Constructing a
Warehouse touches no file; every method opens the database only for as long as it needs it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from pipeline.contract.evolution import DiscoveredColumn
from pipeline.contract.tables import TableSpec
from pipeline.warehouse.duck.connection import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_MEMORY_LIMIT,
    ConnectionSettings,
    open_connection,
)
from pipeline.warehouse.duck.schema import ensure_tables, table_def
from pipeline.warehouse.lake.iceberg import IcebergMirror, iceberg_location
from pipeline.warehouse.lake.lake import LAKE_ROW_GROUP_ROWS
from pipeline.warehouse.lake.lakestore import LocalLake, open_lake
from pipeline.warehouse.loading.load import Load
from pipeline.warehouse.merge.context import CommitContext, Upsert
from pipeline.warehouse.merge.recovery import recover
from pipeline.warehouse.merge.state import (
    ensure_state_tables,
    read_cursor,
    read_discovered,
    read_last_loads,
    read_position,
)
from pipeline.warehouse.merge.upsert import upsert_stage

if TYPE_CHECKING:
    from pipeline.settings import LakeSettings, WarehouseSettings


def utc_now() -> datetime:
    return datetime.now(UTC)


class WarehouseLocations(Protocol):
    """What Warehouse.from_settings reads of pipeline.settings.Settings: the warehouse's part and the lake's."""

    @property
    def warehouse(self) -> WarehouseSettings: ...

    @property
    def lake(self) -> LakeSettings: ...


class Warehouse:
    def __init__(
        self,
        path: Path,
        lake_dir: Path | str,
        *,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        temp_directory: Path | None = None,
        threads: int | None = None,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        part_rows: int = 1_000_000,
        row_group_rows: int = LAKE_ROW_GROUP_ROWS,
        clock: Callable[[], datetime] = utc_now,
        upsert: Upsert = upsert_stage,
        table_mirror: IcebergMirror | None = None,
    ) -> None:
        self.path = Path(path)
        self.lake = open_lake(lake_dir)  # a local directory or s3://bucket/prefix (lake/lakestore.py)
        self.lake_dir = self.lake.root if isinstance(self.lake, LocalLake) else self.lake.location
        self.connection_settings = ConnectionSettings(memory_limit, temp_directory, threads, lock_timeout)
        self.upsert = upsert  # how a staged table is applied; only bench/upsert_options.py passes another
        self.part_rows = part_rows
        self.row_group_rows = row_group_rows
        self.clock = clock
        self._shared: duckdb.DuckDBPyConnection | None = None  # set within one_connection()
        # Iceberg tables kept equal to this warehouse by the mirror step after the commits (lake/iceberg.py); None: none
        self.table_mirror = table_mirror

    @classmethod
    def from_settings(cls, settings: WarehouseLocations, **overrides: Any) -> Warehouse:
        """From pipeline.settings.Settings: its warehouse part (the file, LESSONSYNC_DUCKDB_*) and its lake part
        (where the lake lives, the Iceberg mirror); `overrides` over the keyword arguments these give."""
        warehouse, lake = settings.warehouse, settings.lake
        options: dict[str, Any] = {
            "memory_limit": warehouse.duckdb_memory_limit,
            "temp_directory": warehouse.duckdb_temp_directory,
            "threads": warehouse.duckdb_threads,
            "lock_timeout": warehouse.duckdb_lock_timeout,
        }
        mirror = iceberg_location(lake)
        if mirror is not None:
            options["table_mirror"] = IcebergMirror(mirror)
        options.update(overrides)
        return cls(warehouse.path, lake.location, **options)

    def __repr__(self) -> str:
        return f"Warehouse(path={str(self.path)!r}, lake_dir={str(self.lake_dir)!r})"

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A DuckDB connection, closed on exit. Raises WarehouseLockedError if another process holds the
        file, WarehouseMissingError for a read-only open of a file that does not exist. Within
        one_connection() it is that block's connection (read-write, closed when the block ends)."""
        if self._shared is not None:
            yield self._shared
            return
        conn = open_connection(self.path, self.connection_settings, read_only=read_only)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def private_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection of the calling thread's own, closed on exit, even within another thread's
        one_connection() (whose connection must not be used from two threads at once): for work on a thread beside
        the commits, the background Iceberg mirror. Same process, so the same DuckDB database instance, its memory
        limit shared; each connection's statements see committed data (MVCC)."""
        conn = open_connection(self.path, self.connection_settings, read_only=False)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def one_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Within the block every connect() (read-only or not) yields ONE read-write connection, opened at the
        start and closed at the end: a step's consecutive look-ups (tables, cursor, window plan) open the file
        once instead of once each (~50 ms per open at scale large). Hold it only around DuckDB work, never
        around a fetch: the file stays locked for as long as the block runs (the one exception: a first load
        inserted while it is fetched, loading/early_insert.py, which is DuckDB work all along). A read-only request
        getting the read-write connection is what connection._connect does anyway when this process writes the file."""
        if self._shared is not None:  # nested: the outer block's connection
            yield self._shared
            return
        with self.connect(read_only=False) as conn:
            self._shared = conn
            try:
                yield conn
            finally:
                self._shared = None

    def commit_context(self, conn: duckdb.DuckDBPyConnection) -> CommitContext:
        """What the commit path needs on `conn` (a read-write connection of this warehouse)."""
        return CommitContext(conn, self.lake, self.upsert)

    def ensure_tables(self, specs: Iterable[TableSpec]) -> None:
        """Create the tables of `specs` (schema lms) or add the columns they gained, in one transaction."""
        wanted = [table_def(spec) for spec in specs]
        with self.connect() as conn:
            ensure_state_tables(conn)
            recover(self.commit_context(conn))
            conn.begin()
            try:
                ensure_tables(conn, wanted)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def recover(self) -> int:
        """Replay loads whose manifest is in the lake but whose DuckDB commit was interrupted."""
        with self.connect() as conn:
            ensure_state_tables(conn)
            return recover(self.commit_context(conn))

    def cursor(self, stream: str) -> datetime | None:
        """The stored cursor of `stream` (None before its first load)."""
        if not self.path.exists():
            return None
        with self.connect(read_only=True) as conn:
            try:
                return read_cursor(conn, stream)
            except duckdb.CatalogException:  # no load committed yet
                return None

    def last_loads(self, streams: Iterable[str]) -> dict[str, tuple[datetime | None, int]]:
        """Each of `streams` that has committed a load: its stored cursor and the sequence number of its last load
        (any load committed since changes the latter). {} before the first load."""
        if not self.path.exists():
            return {}
        with self.connect(read_only=True) as conn:
            try:
                return read_last_loads(conn, streams)
            except duckdb.CatalogException:  # no load committed yet
                return {}

    def position(self, stream: str) -> int | None:
        """The stored log position of `stream` (Load.commit(position=...)); None before its first load."""
        if not self.path.exists():
            return None
        with self.connect(read_only=True) as conn:
            try:
                return read_position(conn, stream)
            except duckdb.BinderException:  # a file from before positions: no stream has one
                return None
            except duckdb.CatalogException:  # no load committed yet
                return None

    def discovered_columns(self) -> tuple[DiscoveredColumn, ...]:
        """The columns loads added for fields the platform began sending (lms._discovered_columns), in order."""
        if not self.path.exists():
            return ()
        with self.connect(read_only=True) as conn:
            return read_discovered(conn)

    def load(self, stream: str, run_id: str, started_at: datetime, part_rows: int | None = None) -> Load:
        """A new load for `stream`; use it as a context manager and call commit() at the end. `part_rows`: rows
        per lake part of this load (default: the warehouse's)."""
        return Load(self, stream, run_id, started_at, part_rows)
