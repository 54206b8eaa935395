"""Every warehouse table mirrored as an Apache Iceberg table, so any engine reads current state from the lake.

The warehouse stays the writer and the Parquet change log (`lake/_loads/`) the source of truth for `rebuild`;
an Iceberg table is derived from the warehouse by a step of its own after the raw commits (pipeline/defs/lake/),
never inside one: whatever happens to the Iceberg side, a load stays committed. Each snapshot records in its
summary the load time it mirrors (`lessonsync.loaded-through`): a table whose snapshot lags the warehouse (the
mirror failed, or never ran) is rolled forward by the next mirror run. Damage heals the same way, from the
warehouse: an unreadable SQLite catalog is set aside and a new one made, a table whose metadata cannot be read or
lives outside this mirror's location (a moved or copied data directory) is registered anew here, a table with a
missing or damaged data file is rewritten whole. A mirror write rewrites only the files changed rows are in: the
changed rows are found by comparing a digest of each candidate row with the digest of the row its key has in the
Iceberg table's files (both computed as they are compared: the files hold the table's columns only), and only the
data files holding changed keys are rewritten (copy-on-write), unless they hold most of the
table (changed keys scattered over it): the table is then written whole from the warehouse. DuckDB reads and
writes the Parquet data files; pyiceberg commits them. A run after loads that changed nothing writes nothing, and does not load pyiceberg: the
warehouse records, per table, the load time and row count its Iceberg table was last seen to hold
(`lms._iceberg_mirrored`), so the mirror opens Iceberg only for the tables a load changed since, or that the
record cannot vouch for (a SQLite catalog is read with the standard library to confirm each table is still
registered here, and each data file of the recorded snapshot on a local disk is stat'ed).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb
import pyarrow as pa

from pipeline.contract.tables import SYNC_STATE_TABLES
from pipeline.warehouse import hooks
from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.catalog import read_catalog
from pipeline.warehouse.duck.connection import scalar
from pipeline.warehouse.duck.schema import set_comments
from pipeline.warehouse.duck.tabledef import (
    DELETED_AT,
    FIRST_LOADED_AT,
    LAST_LOADED_AT,
    ROW_CHANGES,
    SCHEMA,
    TableDef,
    changed_tables,
)
from pipeline.warehouse.lake.first_load_files import FirstLoadFiles, take
from pipeline.warehouse.lake.iceberg_files import FILE_IO, data_file, iceberg_schema
from pipeline.warehouse.lake.lakestore import attached_filesystem, open_lake

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction
    from sqlalchemy.engine import Engine

    from pipeline.settings import LakeSettings

log = logging.getLogger(__name__)

# Digests computed where a change is compared (_with_digests). Tables written by earlier versions also hold them
# as fields, which the mirror drops from the schema (_table_for); their old data files stay readable as they are.
KEY_DIGEST = "_lessonsync_key_hash"  # a digest of the row's key: how a changed row finds the one it replaces
ROW_DIGEST = "_lessonsync_row_hash"  # a digest of the row's non-null values: tells a changed row from a touched one
LOADED_THROUGH = "lessonsync.loaded-through"  # snapshot summary: the warehouse load time this snapshot mirrors
FILE_COLUMN = "_lessonsync_file"  # the data file a row was read from, beside its columns
CONTENT_DIGEST = "lessonsync.content-digest"  # snapshot summary of a mart: its row count and rows' digests XORed
EMPTY_DIGEST = "0:0"  # the content digest of a mart without rows
MARTS_NAMESPACE = "analytics"
# The SQL catalog keeps many catalogs in one database, told apart by this name: a reader (pyiceberg, Trino's and
# Spark's JDBC catalog) names it too.
CATALOG_NAME = "lessonsync"
BATCH_ROWS = 100_000  # rows per appended data file: bounds memory and the bytes a changed key rewrites
# Rows per row group of a data file, which holds up to BATCH_ROWS in several. DuckDB's Parquet writer holds a row group
# in memory until it writes it, and the first-load files are written beside the fetch under a small memory limit
# (early_insert.py): a row group of wide rows that nearly fills it makes the copy spill and fault its buffers in again.
ROW_GROUP_ROWS = 50_000
COPY_CHUNK = 8 << 20
# Past this share of changed rows, or this many, rewriting the whole table is cheaper than rewriting the files
# that hold them (changed keys spread over most files by then).
REWRITE_FRACTION = 0.25
MAX_ROWS_CHANGED = 200_000
# Past this share of the table's rows in the files holding changed keys, the table is rewritten whole too.
REWRITE_FRACTION_OF_FILES = 0.5
# Changed keys spread over the files holding the touched ones leave one of them unchanged only rarely once there are
# this many a file: when those files hold most of the table, it is rewritten whole without comparing their rows.
CHANGES_A_FILE_FOR_A_REWRITE = 4
# How long a write waits for a SQLite catalog another process holds (a reader's open transaction, a writer), or for a
# lock another session holds in a PostgreSQL catalog, before the mirror step fails;
# LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT sets it. The warehouse's write lock is held meanwhile, so it stays a few
# minutes at most.
DEFAULT_CATALOG_BUSY_TIMEOUT = 180.0
# Per mirror and table, what its Iceberg table was last seen to hold. Written only after the Iceberg commit (or a
# check) it records, so a crash between the two leaves the record behind the table, never ahead: the next commit
# opens that table and finds it current.
MIRROR_RECORD = f"{SCHEMA}._iceberg_mirrored"
MART_RECORD_PREFIX = f"{MARTS_NAMESPACE}."  # a mart's row in the record: its table name, namespaced
MART_STATE = "mart state "  # a mart's row keeps its state (_mart_state) in `columns`
MIRROR_RECORD_DDL = f"""CREATE TABLE IF NOT EXISTS {MIRROR_RECORD} (
    mirror VARCHAR NOT NULL,  -- the Iceberg location and a digest of the catalog URL (never the URL: it may hold a password)
    table_name VARCHAR NOT NULL,
    loaded_through TIMESTAMPTZ NOT NULL,  -- the newest warehouse load the Iceberg table equals
    row_count BIGINT NOT NULL,  -- the Iceberg table's rows then
    columns VARCHAR NOT NULL,  -- the warehouse table's columns then: a column added since is a change
    PRIMARY KEY (mirror, table_name)
)"""
# Per mirror and table, the data files of the snapshot the record vouches for, so that vouching also sees one lost
# or truncated on a local disk (a stat each) without opening Iceberg. Written after the record; read only beside
# the catalog's own metadata location for the table (when the catalog says it), so an older entry is never trusted.
MIRROR_FILES = f"{SCHEMA}._iceberg_mirrored_files"
MIRROR_FILES_DDL = f"""CREATE TABLE IF NOT EXISTS {MIRROR_FILES} (
    mirror VARCHAR NOT NULL,
    table_name VARCHAR NOT NULL,  -- a raw table's name, or analytics.<mart>
    metadata_location VARCHAR NOT NULL,  -- the table's metadata file whose current snapshot holds these files
    data_files STRUCT(path VARCHAR, size BIGINT)[] NOT NULL,
    PRIMARY KEY (mirror, table_name)
)"""


class TableFormatError(RuntimeError):
    """An Iceberg table could not be brought up to the warehouse. The warehouse holds every load: the next mirror
    run rolls the table forward."""


class CatalogUnavailable(TableFormatError):
    """The catalog cannot be opened or written (locked past the bound, unreachable): no table can be, so the mirror
    stops at once."""


@dataclass(frozen=True)
class IcebergLocation:
    """Where the mirror lives: a SQL catalog (SQLite file, or the PostgreSQL database of the Dagster
    instance) and a warehouse location (a local directory or s3://bucket/prefix)."""

    catalog_url: str
    location: str
    io_properties: Mapping[str, str] = field(default_factory=dict)
    busy_timeout: float = DEFAULT_CATALOG_BUSY_TIMEOUT  # seconds a SQLite catalog held elsewhere is waited for

    @classmethod
    def for_lake(
        cls, lake_location: Path | str, catalog_url: str, busy_timeout: float = DEFAULT_CATALOG_BUSY_TIMEOUT
    ) -> IcebergLocation:
        if isinstance(lake_location, Path):
            location = _file_location((lake_location / "iceberg").resolve())
            return cls(catalog_url, location, busy_timeout=busy_timeout)
        return cls(catalog_url, f"{str(lake_location).rstrip('/')}/iceberg", s3_properties(), busy_timeout)

    @property
    def catalog_file(self) -> Path | None:
        """The file of a SQLite catalog; None for another database."""
        return sqlite_file(self.catalog_url)

    def holds(self, location: str) -> bool:
        """Whether a table or metadata location lies under this mirror's location (not another directory's)."""
        return location.startswith(self.location.rstrip("/") + "/")


def iceberg_location(lake: LakeSettings) -> IcebergLocation | None:
    """Where the Iceberg mirror of the lake's settings (Settings.lake) lives; None when LESSONSYNC_TABLE_FORMAT=none."""
    if lake.iceberg_catalog is None:
        return None
    return IcebergLocation.for_lake(lake.location, lake.iceberg_catalog, lake.iceberg_catalog_busy_timeout)


def s3_properties() -> dict[str, str]:
    """pyiceberg's S3 settings from the same AWS_* variables the lake's s3fs reads."""
    names = {
        "AWS_ENDPOINT_URL": "s3.endpoint",
        "AWS_ACCESS_KEY_ID": "s3.access-key-id",
        "AWS_SECRET_ACCESS_KEY": "s3.secret-access-key",
        "AWS_SESSION_TOKEN": "s3.session-token",
    }
    properties = {prop: os.environ[var] for var, prop in names.items() if os.environ.get(var)}
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        properties["s3.region"] = region
    return properties


def sqlalchemy_url(url: str, busy_timeout: float | None = None) -> str:
    """A postgresql:// URL as SQLAlchemy names its psycopg2 driver; a SQLite one with `busy_timeout` as its
    `timeout` (SQLAlchemy hands it to sqlite3: how long a locked database is waited for); anything else as given."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix) :]
    if busy_timeout is not None and url.startswith("sqlite:") and "timeout=" not in url:
        return f"{url}{'&' if '?' in url else '?'}timeout={busy_timeout:g}"
    return url


def bound_lock_waits(engine: Engine, seconds: float) -> None:
    """On PostgreSQL, each connection of `engine` waits at most `seconds` for a lock another session holds: its
    `lock_timeout`, set by a statement as it opens (not as a connection option, which PgBouncer and RDS Proxy
    refuse) and committed, so that a rollback keeps it. Connections the pool opened before are closed."""
    if engine.dialect.name != "postgresql":
        return
    from sqlalchemy import event

    def bound(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET lock_timeout = {max(1, round(seconds * 1000))}")
        finally:
            cursor.close()
        dbapi_connection.commit()

    event.listen(engine, "connect", bound)
    engine.dispose()


def sqlite_file(url: str) -> Path | None:
    """The file a sqlite:///path URL names; None for any other URL, or an in-memory database."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def set_aside_if_unreadable(path: Path, busy_timeout: float) -> Path | None:
    """A catalog file SQLite cannot read as a database (overwritten, truncated, corrupt) is renamed aside, with the
    time in its name and its journal beside it (a hot journal must not meet the new file), and a WARNING names it;
    the next open then creates an empty catalog. Returns where it went. A locked catalog is not unreadable: the
    lock error is raised."""
    if not path.exists():
        return None
    problem = _sqlite_problem(path, busy_timeout)
    if problem is None:
        return None
    aside = path.with_name(f"{path.name}.unreadable-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
    for suffix in ("", "-journal", "-wal", "-shm"):
        with suppress(FileNotFoundError):
            Path(f"{path}{suffix}").rename(f"{aside}{suffix}")
    log.warning(
        "Iceberg catalog %s is not a readable SQLite database (%s): kept as %s; a new catalog is created and every "
        "table registered anew from the warehouse",
        path,
        problem,
        aside.name,
    )
    return aside


def _sqlite_problem(path: Path, busy_timeout: float) -> str | None:
    """Why SQLite cannot read the file as a database, or None when it can."""
    try:
        with closing(_open_read_only(path, busy_timeout)) as db:
            answer = db.execute("PRAGMA quick_check").fetchone()
    except sqlite3.DatabaseError as error:
        if getattr(error, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
            return str(error)
        raise
    return None if answer and answer[0] == "ok" else f"quick_check: {answer[0] if answer else 'no answer'}"


def _open_read_only(path: Path, busy_timeout: float) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=busy_timeout)


@dataclass
class MirrorStats:
    table: str  # namespace.table, e.g. lms.answers
    rows_written: int = 0
    keys_deleted: int = 0
    rewritten: bool = False
    seconds: float = 0.0
    repaired: str = ""  # the damage that made the table registered anew or rewritten whole, if any
    error: str = ""  # why the table is still behind the warehouse, if it is
    written_while_fetched: bool = False  # its rows are the files its first load wrote as it was fetched

    @property
    def wrote(self) -> bool:
        return self.rows_written > 0 or self.keys_deleted > 0 or self.rewritten


@dataclass(frozen=True)
class _NewTable:
    """A table to register under this mirror: created with its first rows in one commit (Iceberg's create-table
    transaction), so a reader never finds it registered without them and its history starts with them. `replaces`:
    the catalog's entry of that name (elsewhere, unreadable) is dropped just before the commit."""

    identifier: tuple[str, str]
    schema: Schema | pa.Schema  # iceberg_files.iceberg_schema's
    replaces: bool = False


class _DataLocation(Protocol):
    """Where a table's data files are placed: a Table, or one about to be created (_NewLocation)."""

    @property
    def io(self) -> FileIO: ...

    def location(self) -> str: ...


@dataclass(frozen=True)
class _NewLocation:
    root: str
    io: FileIO

    def location(self) -> str:
        return self.root


class IcebergMirror:
    """Mirrors `lms.*` and the published marts of one warehouse into one Iceberg catalog."""

    def __init__(self, where: IcebergLocation, unmirrored: Collection[str] = SYNC_STATE_TABLES) -> None:
        self.where = where
        self.unmirrored = frozenset(unmirrored)  # warehouse tables of schema lms kept out of the Iceberg tables
        self._catalog: SqlCatalog | None = None

    def __repr__(self) -> str:  # the catalog URL may hold a password
        return f"IcebergMirror(location={self.where.location!r})"

    @property
    def mirror_id(self) -> str:
        digest = hashlib.sha256(self.where.catalog_url.encode()).hexdigest()[:16]
        return f"{self.where.location}#{digest}"

    @property
    def catalog(self) -> SqlCatalog:
        if self._catalog is None:
            from pyiceberg.catalog.sql import SqlCatalog

            hooks.reached("iceberg_catalog")
            catalog: SqlCatalog | None = None
            try:
                path = self.where.catalog_file
                if path is not None:
                    set_aside_if_unreadable(path, self.where.busy_timeout)
                catalog = SqlCatalog(
                    CATALOG_NAME,
                    uri=sqlalchemy_url(self.where.catalog_url, self.where.busy_timeout),
                    warehouse=self.where.location,
                    **{**FILE_IO, **self.where.io_properties},
                )
                bound_lock_waits(catalog.engine, self.where.busy_timeout)
                for namespace in (SCHEMA, MARTS_NAMESPACE):
                    catalog.create_namespace_if_not_exists(namespace)
            except Exception as error:
                if catalog is not None:
                    catalog.engine.dispose()
                raise self._unavailable(error) from error
            self._catalog = catalog
        return self._catalog

    def close(self) -> None:
        """Close the catalog's database connections. A write that failed on a locked SQLite catalog keeps its lock
        (and its journal) until its connection closes: every path that gives up on the catalog closes it."""
        if self._catalog is not None:
            self._catalog.engine.dispose()
            self._catalog = None

    def _unavailable(self, error: BaseException) -> CatalogUnavailable:
        """The catalog's failure said plainly: which catalog (never its URL: it may hold a password), and why; the
        catalog's connections closed."""
        self.close()
        path = self.where.catalog_file
        name = f"Iceberg catalog {path}" if path is not None else "Iceberg catalog database"
        if any(said in str(error).lower() for said in ("locked", "busy", "lock timeout")):
            return CatalogUnavailable(
                f"{name} stayed locked by another process for {self.where.busy_timeout:g} s "
                "(LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT): end the reader or writer holding it"
            )
        return CatalogUnavailable(f"{name} cannot be used ({type(error).__name__}: {_first_line(error)})")

    # -- raw tables ---------------------------------------------------------------------------------------

    def sync_behind(self, conn: duckdb.DuckDBPyConnection) -> list[MirrorStats]:
        """Every table whose Iceberg table the record cannot vouch for (a load changed it since, its rows differ, it
        is new, a mirror run failed or never came, or a SQLite catalog no longer registers it here). After loads
        that changed nothing, no Iceberg table is opened and pyiceberg is not imported."""
        current = self._current(conn)
        self._drop_unmirrored(conn)
        latest = _latest_load_time(conn)
        if current and latest is not None:  # moving the record on keeps the next run's look-back short
            _record(conn, self.mirror_id, {table: (latest, rows) for table, rows in current.items()})
        behind = [table.name for table in self._mirrored_tables(conn) if table not in current]
        return self.sync_raw(conn, behind) if behind else []

    def sync_tables_behind(self, conn: duckdb.DuckDBPyConnection, names: Iterable[str]) -> list[MirrorStats]:
        """sync_behind for the tables `names` only, while loads of other tables may commit on other connections:
        the record of a table it vouches for is left as it is (moving it to the newest load time could vouch for a
        load committed meanwhile), and each table brought up records the load time read before its rows."""
        wanted = list(names)
        current = {table.name for table in self._current(conn, set(wanted))}
        behind = [name for name in wanted if name not in current]
        return self.sync_raw(conn, behind) if behind else []

    def prepare(self, conn: duckdb.DuckDBPyConnection) -> None:
        """The record table created and described now, before commits run beside the mirror on other connections
        (a catalog change there and here at once would conflict)."""
        _ensure_record(conn)

    def _current(self, conn: duckdb.DuckDBPyConnection, names: Collection[str] | None = None) -> dict[TableDef, int]:
        """The tables (-> rows; of `names` only, when given) the record vouches for, that a SQLite catalog still
        registers here, and whose recorded data files are all there (_whole_by_record)."""
        current = {t: rows for t, rows in _current_by_record(conn, self.mirror_id, names).items() if self._mirrors(t)}
        here = self._still_here(conn, SCHEMA, {t.name: t.name for t in current})
        return {t: rows for t, rows in current.items() if t.name in here}

    def _still_here(self, conn: duckdb.DuckDBPyConnection, namespace: str, names: Mapping[str, str]) -> set[str]:
        """Of the record's `names` (-> the table's name in `namespace`), those a SQLite catalog still registers here
        (any, for a catalog that is not read) and whose recorded data files are all there (_whole_by_record)."""
        registered = self._registered(namespace) if names else None
        locations = {
            record: registered.get(table) if registered is not None else None
            for record, table in names.items()
            if registered is None or self._registered_here(registered.get(table))
        }
        return _whole_by_record(conn, self.mirror_id, locations)

    def current_data_files(self, conn: duckdb.DuckDBPyConnection, name: str) -> list[Path] | None:
        """The data files of the raw table `name`'s Iceberg table when they hold the warehouse table's rows as it is
        now (the record vouches for it, a SQLite catalog registers it here, its current snapshot holds the recorded
        rows, and every file is on the local disk with its recorded size), for a reader that takes the files as they
        are; None otherwise, and on any error: the caller then copies the table itself."""
        try:
            current = {table.name: rows for table, rows in self._current(conn, {name}).items()}
            if name not in current:
                return None
            ice = self.catalog.load_table((SCHEMA, name))
            if not current[name] or _iceberg_rows(ice) != current[name]:
                return None
            tasks = list(ice.scan().plan_files())
            local = [_local_path(task.file.file_path) for task in tasks]
            whole = all(_whole(ice, task.file.file_path, task.file.file_size_in_bytes, remote=False) for task in tasks)
            if not whole or any(path is None for path in local) or any(task.delete_files for task in tasks):
                return None
            return [path for path in local if path is not None]
        except Exception as error:  # the mirror is a derived copy: whatever fails here, the caller copies the table
            log.info("iceberg %s.%s: data files not offered (%s: %s)", SCHEMA, name, type(error).__name__, error)
            return None

    def _registered(self, namespace: str) -> dict[str, str] | None:
        """The tables of `namespace` a SQLite catalog registers, with their metadata locations, read with the
        standard library: {} when the file is missing or unreadable (its tables are then opened, and the catalog
        judged and repaired, by pyiceberg); None for a catalog in another database (the record is trusted)."""
        path = self.where.catalog_file
        if path is None:
            return None
        if not path.exists():
            return {}
        query = (
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?"
        )
        try:
            with closing(_open_read_only(path, min(self.where.busy_timeout, 5.0))) as db:
                return {name: location for name, location in db.execute(query, [CATALOG_NAME, namespace]).fetchall()}
        except sqlite3.Error:
            return {}

    def _registered_here(self, metadata_location: str | None) -> bool:
        """Whether a table's metadata lies under this mirror's location, and (on a local disk) exists."""
        if metadata_location is None or not self.where.holds(metadata_location):
            return False
        local = _local_path(metadata_location)
        return local is None or local.is_file()

    def sync_raw(
        self, conn: duckdb.DuckDBPyConnection, names: Iterable[str] | None = None, *, verify_files: bool = False
    ) -> list[MirrorStats]:
        """Bring the Iceberg table of each warehouse table (default: every one) up to the warehouse, whatever the
        record says. `conn` holds the warehouse's write lock, so no load commits meanwhile. A table that fails
        is reported in its stats (`error`) and the others go on; a catalog that cannot be used raises
        CatalogUnavailable at once. `verify_files`: also check that the data files on object storage are there
        whole (on a local disk they are checked whenever a table is opened)."""
        wanted = set(names) if names is not None else None
        if wanted is None:
            self._drop_unmirrored(conn)
        return [
            self._healing(f"{SCHEMA}.{table.name}", partial(self._sync_table, conn, table, verify_files))
            for table in self._mirrored_tables(conn)
            if wanted is None or table.name in wanted
        ]

    def _mirrors(self, table: TableDef) -> bool:
        return table.name not in self.unmirrored

    def _mirrored_tables(self, conn: duckdb.DuckDBPyConnection) -> tuple[TableDef, ...]:
        """The warehouse tables kept as Iceberg tables: every data table of schema lms but the sync state."""
        return tuple(table for table in read_catalog(conn) if self._mirrors(table))

    def _drop_unmirrored(self, conn: duckdb.DuckDBPyConnection) -> None:
        """An Iceberg table the record shows for a table no longer mirrored (kept by an earlier version) is taken
        out of the catalog, its files purged when they lie in this mirror's location, and its record removed: no
        reader finds it stale. Only the record is read when there is none (pyiceberg is not imported). A table
        that cannot be dropped now is tried again at the next run; the other tables are mirrored meanwhile."""
        query = f"SELECT table_name FROM {MIRROR_RECORD} WHERE mirror = ? AND list_contains(?, table_name)"
        _ensure_record(conn)
        for (name,) in conn.execute(query, [self.mirror_id, sorted(self.unmirrored)]).fetchall():
            try:
                self._drop((SCHEMA, name))
            except Exception as error:
                if _is_catalog_error(error):
                    raise self._unavailable(error) from error
                log.warning("iceberg %s.%s: not dropped (%s); tried again at the next mirror run", SCHEMA, name, error)
                continue
            for record in (MIRROR_RECORD, MIRROR_FILES):
                conn.execute(f"DELETE FROM {record} WHERE mirror = ? AND table_name = ?", [self.mirror_id, name])

    def _drop(self, identifier: tuple[str, str]) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            ice = self.catalog.load_table(identifier)
        except NoSuchTableError:
            return
        except (OSError, ValueError):  # its metadata cannot be read: the catalog entry goes, its files cannot be named
            self.catalog.drop_table(identifier)
        else:
            if self.where.holds(ice.metadata_location):
                self.catalog.purge_table(identifier)
            else:  # another directory's table: nothing is deleted there
                self.catalog.drop_table(identifier)
        log.info("iceberg %s: dropped (sync state, no longer mirrored)", ".".join(identifier))

    def _healing(self, name: str, sync: Callable[[str], MirrorStats]) -> MirrorStats:
        """`sync("")`; when the table cannot be brought up in place because a file of it is missing or damaged (a
        metadata, manifest or data file), once more with the table registered anew and rewritten whole from the
        warehouse. Any other failure (out of memory, a conflicting commit) is reported, the table kept as it is."""
        try:
            return sync("")
        except Exception as error:
            if _is_catalog_error(error):
                raise self._unavailable(error) from error
            first = f"{type(error).__name__}: {_first_line(error)}"
            if not _is_damage(error):
                return MirrorStats(name, error=f"{name}: {first}")
        log.warning("iceberg %s could not be updated in place (%s): registering it anew", name, first)
        try:
            return sync(f"not updatable in place ({first})")
        except Exception as error:
            if _is_catalog_error(error):
                raise self._unavailable(error) from error
            return MirrorStats(name, error=f"{name}: {type(error).__name__}: {_first_line(error)}")

    def _sync_table(
        self, conn: duckdb.DuckDBPyConnection, table: TableDef, verify_files: bool, recreate: str
    ) -> MirrorStats:
        started = time.perf_counter()
        stats = MirrorStats(f"{SCHEMA}.{table.name}")
        select = _mirror_select(table)
        ice, stats.repaired = self._table_for(conn, (SCHEMA, table.name), select, recreate)
        latest = _latest_load_time(conn)
        if isinstance(ice, _NewTable):
            properties = {LOADED_THROUGH: latest.isoformat()} if latest is not None else {}
            with _first_load_files(conn, table, select) as first_load:
                stats.written_while_fetched = first_load is not None
                created, stats.rows_written = self._create(conn, ice, select, properties, first_load)
            stats.rewritten = True
            hooks.reached("iceberg_committed")
            if latest is not None:
                _record(conn, self.mirror_id, {table: (latest, _iceberg_rows(created))})
                _record_files(conn, self.mirror_id, table.name, created)
            return _logged(stats, started)
        if latest is None:
            return stats
        if not stats.repaired:
            stats.repaired = _damage(ice, verify_files)
        mirrored_through = None if stats.repaired else _loaded_through(ice)
        if mirrored_through is not None and mirrored_through >= latest:
            _record(conn, self.mirror_id, {table: (mirrored_through, _iceberg_rows(ice))})
            _record_files(conn, self.mirror_id, table.name, ice)
            return stats
        warehouse_rows = _count(conn, f"{SCHEMA}.{q(table.name)}")
        if (
            mirrored_through is not None
            and _iceberg_rows(ice) == warehouse_rows
            and not _changed_since(conn, table.name, mirrored_through)
        ):
            _record(conn, self.mirror_id, {table: (latest, warehouse_rows)})
            _record_files(conn, self.mirror_id, table.name, ice)
            return stats  # every load since reported nothing inserted, updated or deleted
        if warehouse_rows == 0 and ice.current_snapshot() is None:  # its first snapshot comes with its first rows
            _record(conn, self.mirror_id, {table: (latest, 0)})
            _record_files(conn, self.mirror_id, table.name, ice)
            return stats
        properties = {LOADED_THROUGH: latest.isoformat()}
        if mirrored_through is None or _iceberg_rows(ice) == 0:
            with _first_load_files(conn, table, select) as first_load:
                stats.written_while_fetched = first_load is not None
                stats.rows_written = _rewrite(conn, ice, select, properties, first_load)
            stats.rewritten = True
        else:
            self._apply_changes(conn, ice, table, select, mirrored_through, warehouse_rows, properties, stats)
        if _iceberg_rows(ice.refresh()) != warehouse_rows:  # rows removed from the warehouse outside a load
            stats.rows_written = _rewrite(conn, ice, select, properties)
            stats.rewritten = True
        hooks.reached("iceberg_committed")
        _record(conn, self.mirror_id, {table: (latest, _iceberg_rows(ice.refresh()))})
        _record_files(conn, self.mirror_id, table.name, ice)
        return _logged(stats, started)

    def _apply_changes(
        self,
        conn: duckdb.DuckDBPyConnection,
        ice: Table,
        table: TableDef,
        select: str,
        since: datetime,
        warehouse_rows: int,
        properties: dict[str, str],
        stats: MirrorStats,
    ) -> None:
        touched = [f"{q(LAST_LOADED_AT)} > $since"]
        if table.has_deleted_at:
            touched.append(f"{q(DELETED_AT)} > $since")
        columns = _column_types(conn, select)
        candidates = _with_digests(f"(SELECT * FROM ({select}) WHERE {' OR '.join(touched)})", columns, table.key)
        # A row first loaded after the snapshot cannot be in it: only older rows are compared with the rows in the
        # table's files, which are not read at all when no older row was written, nor when the loads since say they
        # updated or deleted no row. (A key removed by hand and loaded again is caught by
        # the row count check after the write.)
        first_loaded = any(name == FIRST_LOADED_AT for name, _ in table.columns)
        new = f"{q(FIRST_LOADED_AT)} > $since" if first_loaded else "false"
        older = f"(SELECT * FROM ({candidates}) WHERE NOT ({new}))"
        changed = "_lessonsync_iceberg_changed"
        changed_in_place = _rows_changed_since(conn, table.name, since, ("updated", "deleted"))
        compared = (not first_loaded or changed_in_place > 0) and _count(conn, older, {"since": since}) > 0
        files = _data_files(conn, ice, self.where) if compared else {}
        with _listed(conn, files):
            try:
                # The files holding an older candidate's key (only the key columns are read), then those files'
                # rows, the digest of its values only for a row whose key a candidate has: DuckDB reads them as the
                # joins need them, never held whole.
                held = _files_holding(conn, files, columns, table.key, older, {"since": since}) if compared else []
                # the loads' own counts say the changes reach most of the table: no comparison could spare a file
                most_changed = changed_in_place >= CHANGES_A_FILE_FOR_A_REWRITE * len(held)
                if most_changed and _most_of_the_table(ice, files, held):
                    stats.rows_written = _rewrite(conn, ice, select, properties)
                    stats.rewritten = True
                    return
                conn.execute(
                    f"CREATE OR REPLACE TEMP TABLE {changed} AS SELECT * FROM ({candidates}) WHERE {new}",
                    {"since": since},
                )
                held_keys = _file_keys(conn, held, columns, table.key)
                candidates_held = (
                    f"SELECT s.* FROM ({held_keys}) s SEMI JOIN {older} c ON s.{KEY_DIGEST} = c.{KEY_DIGEST}"
                )
                stored = _with_row_digest(f"({candidates_held})", columns)
                if compared:
                    conn.execute(
                        f"INSERT INTO {changed} SELECT c.* FROM {older} c ANTI JOIN ({stored}) s "
                        f"ON c.{KEY_DIGEST} = s.{KEY_DIGEST} AND c.{ROW_DIGEST} = s.{ROW_DIGEST}",
                        {"since": since},
                    )
                n_changed = _count(conn, changed)
                if n_changed == 0:
                    return
                if n_changed > min(REWRITE_FRACTION * warehouse_rows, MAX_ROWS_CHANGED):
                    stats.rows_written = _rewrite(conn, ice, select, properties)
                    stats.rewritten = True
                    return
                # Copy-on-write: each data file holding a changed key is replaced by one without it, and the changed
                # rows are added as new files, in one snapshot. DuckDB reads and writes the files.
                replaced = conn.execute(  # one scan of the keys: which files hold a changed one, and how many each
                    f"SELECT s.{FILE_COLUMN}, count(*) FROM ({held_keys}) s SEMI JOIN {changed} c "
                    f"ON s.{KEY_DIGEST} = c.{KEY_DIGEST} GROUP BY s.{FILE_COLUMN}"
                ).fetchall()
                affected = [name for name, _ in replaced]
                if _most_of_the_table(ice, files, affected):
                    # the changed keys are spread over most of the table: one write of it from the warehouse costs less
                    # than reading each of those files back without them
                    stats.rows_written = _rewrite(conn, ice, select, properties)
                    stats.rewritten = True
                    return
                stats.keys_deleted = sum(keys for _, keys in replaced)
                written_columns = ", ".join(q(c) for c in columns)
                with tempfile.TemporaryDirectory(prefix="lessonsync-iceberg-", dir=staging_dir(conn)) as staging:
                    written, stats.rows_written = _write_data_files(
                        conn, ice, f"SELECT {written_columns} FROM {changed}", f"{staging}/changed"
                    )
                    for number, name in enumerate(affected):
                        file_keys = _file_keys(conn, [name], columns, table.key)
                        kept = (
                            f"SELECT {written_columns} FROM ({file_keys}) s ANTI JOIN {changed} c "
                            f"ON s.{KEY_DIGEST} = c.{KEY_DIGEST}"
                        )
                        written += _write_data_files(conn, ice, kept, f"{staging}/kept{number}")[0]
                    with ice.transaction() as tx:
                        _commit_files(tx, ice.io, [files[name] for name in affected], written, properties)
            finally:
                conn.execute(f"DROP TABLE IF EXISTS {changed}")

    def _table_for(
        self, conn: duckdb.DuckDBPyConnection, identifier: tuple[str, str], select: str, recreate: str = ""
    ) -> tuple[Table | _NewTable, str]:
        """The Iceberg table evolved to the query's Arrow schema (columns are only added, as in the warehouse), or
        the table to create with it (_NewTable: `_create` registers it with its rows), each field's `doc` the
        warehouse column's description, and the damage that made it registered anew ("" when none). A table the
        catalog registers outside this mirror's location (a moved data directory; a copy's catalog still naming the
        original's files) or whose metadata cannot be read is registered anew here, and nothing is written where the
        old entry pointed; so is one `recreate` names a reason for."""
        from pyiceberg.exceptions import NoSuchTableError

        columns = ", ".join(q(c) for c in _written_columns(conn, select))
        docs = _column_docs(conn, identifier)
        schema = _with_docs(conn.sql(f"SELECT {columns} FROM ({select}) LIMIT 0").to_arrow_table().schema, docs)
        reason = recreate
        if not reason:
            try:
                ice = self.catalog.load_table(identifier)
            except NoSuchTableError:
                return _NewTable(identifier, iceberg_schema(schema)), ""
            except (OSError, ValueError) as error:  # the metadata file it names is gone or damaged
                reason = f"its metadata cannot be read ({type(error).__name__}: {_first_line(error)})"
            else:
                if not (self.where.holds(ice.metadata_location) and self.where.holds(ice.location())):
                    reason = f"the catalog has it at {ice.location()}, outside {self.where.location}"
        if reason:
            log.warning(
                "iceberg %s: %s; registered anew under %s and written whole from the warehouse",
                ".".join(identifier),
                reason,
                self.where.location,
            )
            return _NewTable(identifier, iceberg_schema(schema), replaces=True), reason
        known = {f.name: f.doc for f in ice.schema().fields}
        stored_digests = [name for name in (KEY_DIGEST, ROW_DIGEST) if name in known and name not in schema.names]
        if stored_digests:
            with ice.update_schema() as update:
                for name in stored_digests:
                    update.delete_column(name)
            ice = ice.refresh()
        if any(name not in known or (name in docs and known[name] != docs[name]) for name in schema.names):
            with ice.update_schema() as update:
                update.union_by_name(iceberg_schema(schema))
            ice = ice.refresh()
        return ice, ""

    def _create(
        self,
        conn: duckdb.DuckDBPyConnection,
        new: _NewTable,
        select: str,
        properties: dict[str, str],
        first_load: FirstLoadFiles | None = None,
    ) -> tuple[Table, int]:
        """Register `new` here with the query's rows as its first snapshot, in one commit, and return it with the
        rows written (`first_load`: those rows, already written as data files). A table with no rows is registered
        without a snapshot (an empty Iceberg table); its first snapshot comes with its first rows."""
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.io import load_file_io

        create = self.catalog.create_table_transaction(new.identifier, schema=new.schema)
        root = create.table_metadata.location
        where = _NewLocation(root, load_file_io({**self.catalog.properties, **create.table_metadata.properties}, root))
        with tempfile.TemporaryDirectory(prefix="lessonsync-iceberg-", dir=staging_dir(conn)) as staging:
            files, rows = _rows_as_data_files(conn, where, select, f"{staging}/rows", first_load)
            if files:
                _commit_files(create, where.io, [], files, properties)
            if new.replaces:  # dropped only now: until this commit, readers keep the entry they had
                with suppress(NoSuchTableError):
                    self.catalog.drop_table(new.identifier)  # the catalog's entry only: no file is deleted
            create.commit_transaction()
        return self.catalog.load_table(new.identifier), rows

    # -- marts --------------------------------------------------------------------------------------------

    def sync_marts(
        self, conn: duckdb.DuckDBPyConnection, relations: Mapping[str, str], *, verify_files: bool = False
    ) -> list[MirrorStats]:
        """Mirror each mart (name -> relation in the warehouse) whole, when its rows differ from the snapshot's or
        the table is damaged; failures as in sync_raw. A mart the record shows mirrored with the same rows,
        columns and descriptions (and, in a SQLite catalog, still registered here) is not opened: when no mart
        changed, pyiceberg is not imported."""
        digests = {name: _rows_digest(conn, f"SELECT * FROM {relation}") for name, relation in relations.items()}
        states = {name: _mart_state(conn, name, relation, digests[name]) for name, relation in relations.items()}
        current = set() if verify_files else self._marts_current(conn, states)
        return [
            MirrorStats(f"{MARTS_NAMESPACE}.{name}")
            if name in current
            else self._healing(
                f"{MARTS_NAMESPACE}.{name}",
                partial(self._sync_mart, conn, name, relation, digests[name], states[name], verify_files),
            )
            for name, relation in relations.items()
        ]

    def _marts_current(self, conn: duckdb.DuckDBPyConnection, states: Mapping[str, str]) -> set[str]:
        """The marts whose recorded state is `states`', whose Iceberg table a SQLite catalog still registers here,
        and whose recorded data files are all there (_whole_by_record)."""
        recorded = _mart_records(conn, self.mirror_id)
        current = {name for name, state in states.items() if recorded.get(name) == state}
        here = self._still_here(conn, MARTS_NAMESPACE, {MART_RECORD_PREFIX + name: name for name in current})
        return {name for name in current if MART_RECORD_PREFIX + name in here}

    def _sync_mart(
        self,
        conn: duckdb.DuckDBPyConnection,
        name: str,
        relation: str,
        digest: str,
        state: str,
        verify_files: bool,
        recreate: str,
    ) -> MirrorStats:
        started = time.perf_counter()
        stats = MirrorStats(f"{MARTS_NAMESPACE}.{name}")
        select = f"SELECT * FROM {relation}"
        ice, stats.repaired = self._table_for(conn, (MARTS_NAMESPACE, name), select, recreate)
        if isinstance(ice, _NewTable):
            ice, stats.rows_written = self._create(conn, ice, select, {CONTENT_DIGEST: digest})
            stats.rewritten = True
        else:
            if not stats.repaired:
                stats.repaired = _damage(ice, verify_files)
            snapshot = ice.current_snapshot()
            # a table without a snapshot holds no rows: its digest is that of an empty mart
            held = (snapshot.summary.get(CONTENT_DIGEST) if snapshot.summary else None) if snapshot else EMPTY_DIGEST
            if stats.repaired or held != digest:
                stats.rows_written = _rewrite(conn, ice, select, {CONTENT_DIGEST: digest})
                stats.rewritten = True
        _record_mart(conn, self.mirror_id, name, state, int(digest.split(":", 1)[0]))
        _record_files(conn, self.mirror_id, MART_RECORD_PREFIX + name, ice)
        stats.seconds = time.perf_counter() - started
        return stats

    # -- maintenance --------------------------------------------------------------------------------------

    def tables(self) -> Iterator[Table]:
        """Every table this catalog registers under this mirror's location (one registered elsewhere is another
        directory's: never written here; the next mirror run registers it anew)."""
        for namespace in (SCHEMA, MARTS_NAMESPACE):
            for identifier in self.catalog.list_tables(namespace):
                ice = self.catalog.load_table(identifier)
                if self.where.holds(ice.metadata_location):
                    yield ice

    def record_files(self, conn: duckdb.DuckDBPyConnection) -> None:
        """Record the data files of every table registered here, as the current snapshot holds them now."""
        for ice in self.tables():
            namespace, name = ice.name()[-2:]
            _record_files(conn, self.mirror_id, name if namespace == SCHEMA else MART_RECORD_PREFIX + name, ice)

    def expire_snapshots(self, retention: timedelta, now: datetime | None = None) -> dict[str, int]:
        """Expire every snapshot older than `retention` (the current one always stays); returns how many per
        table. Data files only older snapshots referenced become unreachable: `compact` does not need them."""
        cutoff = (now or datetime.now(UTC)) - retention
        expired = {}
        for ice in self.tables():
            old = [s for s in ice.snapshots() if s.timestamp_ms < cutoff.timestamp() * 1000]
            current = ice.current_snapshot()
            ids = [s.snapshot_id for s in old if current is None or s.snapshot_id != current.snapshot_id]
            if ids:
                ice.maintenance.expire_snapshots().by_ids(ids).commit()
            expired[".".join(ice.name())] = len(ids)
        return expired

    def compact(self, conn: duckdb.DuckDBPyConnection, min_files: int = 16) -> dict[str, int]:
        """Rewrite, from the warehouse it equals, each raw table spread over more data files than it needs
        (at least `min_files`, and more than twice one file per BATCH_ROWS rows): one new snapshot, the same
        rows in fewer files. Returns the files before, per table rewritten."""
        rewritten = {}
        tables = {t.name: t for t in self._mirrored_tables(conn)}
        for name, table in tables.items():
            try:
                ice = self.catalog.load_table((SCHEMA, name))
            except Exception:
                continue
            if not self.where.holds(ice.metadata_location):
                continue  # another directory's table: never written here
            files = len(list(ice.scan().plan_files()))
            needed = max(1, -(-_iceberg_rows(ice) // BATCH_ROWS))
            if files >= min_files and files > 2 * needed:
                snapshot = ice.current_snapshot()
                properties = dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}
                properties = {k: v for k, v in properties.items() if k.startswith("lessonsync.")}
                _rewrite(conn, ice, _mirror_select(table), properties)
                rewritten[name] = files
        return rewritten


@dataclass(frozen=True)
class MaintenanceReport:
    expired: Mapping[str, int]  # snapshots expired per table
    compacted: Mapping[str, int]  # data files before, per table rewritten
    repaired: Mapping[str, str] = field(default_factory=dict)  # table -> the damage it was rewritten for
    failed: Mapping[str, str] = field(default_factory=dict)  # table -> why it is still behind or damaged

    def summary(self) -> str:
        expired = sum(self.expired.values())
        compacted = ", ".join(f"{name} ({files} files)" for name, files in self.compacted.items()) or "none"
        repaired = "; ".join(f"{name} ({why})" for name, why in self.repaired.items()) or "none"
        line = (
            f"repaired: {repaired}; {expired} snapshots expired over {len(self.expired)} tables; compacted: {compacted}"
        )
        return line + "".join(f"\nNOT REPAIRED: {why}" for why in self.failed.values())


def maintain(
    mirror: IcebergMirror,
    conn: duckdb.DuckDBPyConnection,
    retention: timedelta,
    marts: Mapping[str, str] | None = None,
) -> MaintenanceReport:
    """Repair, compact, then expire. Every raw table and mart (name -> warehouse relation) is checked first, its
    data files included, and one that is damaged or behind is rewritten from the warehouse; then compaction, and
    the snapshots it replaced age out with the rest."""
    checked = mirror.sync_raw(conn, verify_files=True) + mirror.sync_marts(conn, marts or {}, verify_files=True)
    repaired = {s.table: s.repaired for s in checked if s.repaired and not s.error}
    failed = {s.table: s.error for s in checked if s.error}
    compacted = mirror.compact(conn)
    expired = mirror.expire_snapshots(retention)
    mirror.record_files(conn)  # compaction and expiry moved the tables' metadata on: the next run vouches anew
    return MaintenanceReport(expired, compacted, repaired, failed)


def table_summaries(mirror: IcebergMirror) -> Iterator[str]:
    """One line per table the catalog registers; one that cannot be read, or lies in another directory, says so."""
    for namespace in (SCHEMA, MARTS_NAMESPACE):
        for identifier in mirror.catalog.list_tables(namespace):
            name = ".".join(identifier)
            try:
                ice = mirror.catalog.load_table(identifier)
                snapshot = ice.current_snapshot()
                summary = snapshot.summary if snapshot else None
                mirrored = (summary.get(LOADED_THROUGH) or summary.get(CONTENT_DIGEST, "")[:12]) if summary else "-"
                files = len(list(ice.scan().plan_files())) if snapshot else 0
            except (OSError, ValueError) as error:
                yield f"{name:40} unreadable ({type(error).__name__}: {_first_line(error)}): the next mirror run rewrites it"
                continue
            elsewhere = "" if mirror.where.holds(ice.metadata_location) else f"  ELSEWHERE {ice.location()}"
            yield (
                f"{name:40} rows {_iceberg_rows(ice):>10,}  files {files:>4}  "
                f"snapshots {len(ice.snapshots()):>4}  mirrors {mirrored}{elsewhere}"
            )


def _mirror_select(table: TableDef) -> str:
    """The warehouse table as the mirror holds it: every column but `last_loaded_at` (load bookkeeping that
    moves on every touch), JSON as text."""
    return mirror_select(f"{SCHEMA}.{q(table.name)}", table.columns)


def mirror_select(relation: str, columns: Iterable[tuple[str, str]]) -> str:
    columns = list(columns)
    kept = [
        f"CAST({q(name)} AS VARCHAR) AS {q(name)}" if kind.upper() == "JSON" else q(name)
        for name, kind in columns
        if name != LAST_LOADED_AT
    ]
    extra = f", {q(LAST_LOADED_AT)}" if any(name == LAST_LOADED_AT for name, _ in columns) else ""
    # last_loaded_at stays in the query to pick candidates by; it is never written (_written_columns)
    return f"SELECT {', '.join(kept)}{extra} FROM {relation}"


def _with_digests(relation: str, columns: Iterable[str], key: Iterable[str], *, values: bool = True) -> str:
    """The relation's rows with a digest of their key (KEY_DIGEST: how a changed row finds the one it replaces)
    and, with `values`, of their values in `columns` (ROW_DIGEST: tells a changed row from a touched one). The
    digests are computed where they are compared, from the warehouse's rows and the data files' alike, never stored:
    a row's values are its own digest's source, and the files stay the table's columns only."""
    columns, key = list(columns), tuple(key)
    # A table without a key (append-only) names each row by its values; the row count check covers repeats.
    key_digest = f"(hash({', '.join(q(k) for k in key)}) >> 1)::BIGINT" if key else _row_digest(columns)
    keyed = f"SELECT *, {key_digest} AS {KEY_DIGEST} FROM {relation}"
    return _with_row_digest(f"({keyed})", columns) if values else keyed


def _with_row_digest(relation: str, columns: Iterable[str]) -> str:
    return f"SELECT *, {_row_digest(columns)} AS {ROW_DIGEST} FROM {relation}"


def _row_digest(names: Iterable[str]) -> str:
    """A 63-bit digest of a row's non-null values, each hashed with its column's name, hashed again (DuckDB combines
    a multi-argument hash linearly: XORing those alone cancels a value two columns share) and XORed: a NULL adds
    nothing, so a column added later (NULL in every old row) leaves old digests as they were. DuckDB's hash is
    not stable across its versions: after an upgrade every row looks changed once, and the table is rewritten."""
    terms = [f"CASE WHEN {q(n)} IS NULL THEN 0::UBIGINT ELSE hash(hash({_sql_string(n)}, {q(n)})) END" for n in names]
    combined = terms[0]
    for term in terms[1:]:
        combined = f"xor({combined}, {term})"
    return f"({combined} >> 1)::BIGINT"


_ARROW_DOC = b"doc"  # the Arrow field metadata pyiceberg makes a field's doc


def _column_docs(conn: duckdb.DuckDBPyConnection, identifier: tuple[str, str]) -> dict[str, str]:
    """Each column's description: the comment on it in the warehouse relation the Iceberg table mirrors (its
    namespace and name are the relation's schema and name)."""
    comments = conn.execute(
        "SELECT column_name, comment FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = ? AND table_name = ? AND comment IS NOT NULL AND comment <> ''",
        list(identifier),
    ).fetchall()
    return dict(comments)


def _with_docs(schema: pa.Schema, docs: Mapping[str, str]) -> pa.Schema:
    """`schema` with each described field's description in the Arrow metadata pyiceberg makes its `doc`."""
    return pa.schema(
        [
            f.with_metadata({**(f.metadata or {}), _ARROW_DOC: docs[f.name].encode()}) if f.name in docs else f
            for f in schema
        ],
        metadata=schema.metadata,
    )


def _digests(conn: duckdb.DuckDBPyConnection, select: str) -> str:
    names = [d[0] for d in conn.execute(f"SELECT * FROM ({select}) LIMIT 0").description]
    return f"SELECT {_row_digest(names)} AS d FROM ({select})"


def _written_columns(conn: duckdb.DuckDBPyConnection, select: str) -> list[str]:
    names = [d[0] for d in conn.execute(f"SELECT * FROM ({select}) LIMIT 0").description]
    return [n for n in names if n != LAST_LOADED_AT]


def _rewrite(
    conn: duckdb.DuckDBPyConnection,
    ice: Table,
    select: str,
    properties: dict[str, str],
    first_load: FirstLoadFiles | None = None,
) -> int:
    """Replace the table's rows with the query's, in one snapshot readers see whole (every current data file out,
    the new ones in; emptied, a snapshot without files still records what it mirrors). DuckDB writes the data files
    (streamed within its memory limit, on its own threads) and Iceberg adds them as they are: a whole table never
    passes through Arrow in this process. `first_load`: the query's rows, already written as data files."""
    with tempfile.TemporaryDirectory(prefix="lessonsync-iceberg-", dir=staging_dir(conn)) as staging:
        files, rows = _rows_as_data_files(conn, ice, select, f"{staging}/rows", first_load)
        if not files and ice.current_snapshot() is None:  # its first snapshot comes with its first rows
            return rows
        current = [task.file for task in ice.scan().plan_files()] if ice.current_snapshot() is not None else []
        with ice.transaction() as tx:
            _commit_files(tx, ice.io, current, files, properties)
    return rows


def _commit_files(
    tx: Transaction, io: FileIO, removed: Iterable[DataFile], added: Iterable[str], properties: dict[str, str]
) -> None:
    """One snapshot in `tx` (an append when the table has none yet): the data files `removed` out, the Parquet files
    at `added` in, their entries made from their footers (iceberg_files.data_file) and their columns named."""
    _name_columns_of_added_files(tx)
    with tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
        for old in removed:
            overwrite.delete_data_file(old)
        for path in added:
            overwrite.append_data_file(data_file(io, tx.table_metadata, path))


def _written_rows(conn: duckdb.DuckDBPyConnection, select: str) -> str:
    """The query's rows as the table holds them (its written columns)."""
    return f"SELECT {', '.join(q(c) for c in _written_columns(conn, select))} FROM ({select})"


def _write_data_files(
    conn: duckdb.DuckDBPyConnection, ice: _DataLocation, query: str, staging: str
) -> tuple[list[str], int]:
    """The query's rows as data files (_copied_data_files), each placed in the table's data directory; returns them
    and the rows."""
    staged, rows = _copied_data_files(conn, query, staging)
    return [_place(ice, path) for path in staged], rows


def _copied_data_files(
    conn: duckdb.DuckDBPyConnection, query: str, staging: str, params: Mapping[str, object] | None = None
) -> tuple[list[Path], int]:
    """DuckDB writes the query's rows into the new directory `staging` as Parquet files of at most BATCH_ROWS rows (a
    copy-on-write delete rewrites at most that many a file); returns them and the rows."""
    group_rows = min(ROW_GROUP_ROWS, BATCH_ROWS)
    rows = int(
        conn.execute(
            f"COPY ({query}) TO {_sql_string(staging)} (FORMAT parquet, COMPRESSION zstd, "
            f"ROW_GROUP_SIZE {group_rows}, ROW_GROUPS_PER_FILE {max(1, BATCH_ROWS // group_rows)})",
            params,
        ).fetchall()[0][0]
    )
    if rows == 0:
        return [], 0
    return sorted(Path(staging).glob("*.parquet")), rows


def _rows_as_data_files(
    conn: duckdb.DuckDBPyConnection, ice: _DataLocation, select: str, staging: str, first_load: FirstLoadFiles | None
) -> tuple[list[str], int]:
    """The mirror query's rows as data files placed in the table's data directory: `first_load`'s files when given,
    else written from the query."""
    if first_load is None:
        return _write_data_files(conn, ice, _written_rows(conn, select), staging)
    return [_place(ice, path) for path in first_load.files], first_load.rows


def write_first_load_files(
    conn: duckdb.DuckDBPyConnection,
    relation: str,
    params: Mapping[str, object],
    target: TableDef,
    staging: Path,
) -> tuple[list[Path], int, tuple[str, ...]]:
    """The rows a first load inserts into its empty `target` (the query `relation`, read with `params`) as the
    mirror would write them from the table once it is committed (first_load_files.py), into the new directory
    `staging`: the files, their rows, and the columns written in order."""
    columns = [(name, kind) for name, kind in target.columns if name != LAST_LOADED_AT]
    files, rows = _copied_data_files(conn, mirror_select(f"({relation})", columns), str(staging), params)
    return files, rows, tuple(name for name, _ in columns)


@contextmanager
def _first_load_files(conn: duckdb.DuckDBPyConnection, table: TableDef, select: str) -> Iterator[FirstLoadFiles | None]:
    """The data files written while the table's first load was fetched, when they are its rows now; whatever of
    them the block did not move into the table is deleted at its end."""
    taken = take(conn, table.name, tuple(_written_columns(conn, select)), table.has_deleted_at)
    if taken is None:
        yield None
        return
    hooks.reached(f"first_load_files_taken:{table.name}")
    try:
        yield taken
    finally:
        taken.delete()


def _data_files(conn: duckdb.DuckDBPyConnection, ice: Table, where: IcebergLocation) -> dict[str, DataFile]:
    """The current snapshot's data files, by the name DuckDB reads each by (a local path or an s3:// URL). Deletes
    are copy-on-write, so these files are the table's rows."""
    files = {}
    for task in ice.scan().plan_files():
        if task.delete_files:
            raise ValueError(f"{task.file.file_path} has delete files; the mirror writes copy-on-write only")
        path = task.file.file_path
        local = _local_path(path)
        files[str(local) if local is not None else path] = task.file
    if any(not name.startswith("/") for name in files):  # object storage: the lake's filesystem, on the connection
        open_lake(where.location).attach(conn)
    return files


@contextmanager
def _listed(conn: duckdb.DuckDBPyConnection, files: Mapping[str, DataFile]) -> Iterator[None]:
    """Within the block, DuckDB's look-ups at the data files on object storage (a HEAD each, a dozen or more a file
    in a change) are answered from one listing of their directory, made on the filesystem the connection reads them
    through. A file the listing lacks, or holds with another size, is damage (the table is written anew). The
    listing is dropped at the end: files written into the directory meanwhile are not in it."""
    filesystem = attached_filesystem(conn)
    directories = {name.rsplit("/", 1)[0] for name in files if not name.startswith("/")}
    if filesystem is None or not directories:
        yield
        return
    try:
        listed = {
            entry["name"]: int(entry["size"])
            for directory in directories
            for entry in filesystem.ls(directory, detail=True, refresh=True)
        }
        for name, data_file in files.items():
            key = filesystem._strip_protocol(name)
            if listed.get(key) != data_file.file_size_in_bytes:
                state = "missing" if key not in listed else f"{listed[key]} bytes, not {data_file.file_size_in_bytes}"
                raise FileNotFoundError(errno.ENOENT, f"data file {state}", name)
        yield
    finally:
        for directory in directories:
            filesystem.invalidate_cache(directory)


def _files_holding(
    conn: duckdb.DuckDBPyConnection,
    files: Collection[str],
    columns: Mapping[str, str],
    key: Iterable[str],
    rows: str,
    params: Mapping[str, object],
) -> list[str]:
    """The data files holding the key of one of `rows` (a relation with KEY_DIGEST): only the files' key columns
    are read, unless the table has no key."""
    keys = _file_keys(conn, files, columns, key)
    query = f"SELECT DISTINCT s.{FILE_COLUMN} FROM ({keys}) s SEMI JOIN {rows} c ON s.{KEY_DIGEST} = c.{KEY_DIGEST}"
    return sorted(row[0] for row in conn.execute(query, params).fetchall())


def _most_of_the_table(ice: Table, files: Mapping[str, DataFile], names: Iterable[str]) -> bool:
    """Whether the data files `names` hold more than REWRITE_FRACTION_OF_FILES of the table's rows."""
    return sum(files[name].record_count for name in names) > REWRITE_FRACTION_OF_FILES * _iceberg_rows(ice)


def _file_keys(
    conn: duckdb.DuckDBPyConnection, files: Collection[str], columns: Mapping[str, str], key: Iterable[str]
) -> str:
    """The rows of data files (_file_rows) with the digest of their key: all a key's look-up reads of them."""
    return _with_digests(_file_rows(conn, files, columns), columns, key, values=False)


def _file_rows(conn: duckdb.DuckDBPyConnection, files: Collection[str], columns: Mapping[str, str]) -> str:
    """A DuckDB table expression over the rows of data files, with the table's columns now cast to their types (a
    column added after a file was written is NULL in it) and the file each row is in (FILE_COLUMN)."""
    if not files:
        nulls = ", ".join(f"CAST(NULL AS {kind}) AS {q(c)}" for c, kind in columns.items())
        return f"(SELECT {nulls}, NULL::VARCHAR AS {FILE_COLUMN} LIMIT 0)"
    names = ", ".join(_sql_string(name) for name in files)
    relation = f"read_parquet([{names}], union_by_name = true, filename = {_sql_string(FILE_COLUMN)})"
    present = {row[0] for row in conn.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()}
    kept = [
        f"CAST({q(c)} AS {kind}) AS {q(c)}" if c in present else f"CAST(NULL AS {kind}) AS {q(c)}"
        for c, kind in columns.items()
    ]
    return f"(SELECT {', '.join(kept)}, {FILE_COLUMN} FROM {relation})"


def _column_types(conn: duckdb.DuckDBPyConnection, select: str) -> dict[str, str]:
    """The written columns of the mirror's query and their DuckDB types, in order."""
    described = conn.execute(f"DESCRIBE SELECT * FROM ({select})").fetchall()
    return {row[0]: row[1] for row in described if row[0] != LAST_LOADED_AT}


def _name_columns_of_added_files(tx: Transaction) -> None:
    """Files DuckDB writes carry no Iceberg field ids: readers map their columns by name (as add_files does)."""
    from pyiceberg.table import TableProperties

    if tx.table_metadata.name_mapping() is None:
        mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})


def staging_dir(conn: duckdb.DuckDBPyConnection) -> str:
    """DuckDB's own temp directory: where the warehouse already spills, on the disk chosen for it."""
    temp = Path(str(scalar(conn, "SELECT current_setting('temp_directory')")))
    temp.mkdir(parents=True, exist_ok=True)
    return str(temp)


def _place(ice: _DataLocation, staged: Path) -> str:
    """Move a data file written locally into the table's data directory: renamed when the table is on a local
    disk, copied through the table's FileIO (object storage) otherwise."""
    target = f"{ice.location().rstrip('/')}/data/{uuid.uuid4()}.parquet"
    local = _local_path(target)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staged, local)  # a rename on the same filesystem, a copy across two
        return target
    with staged.open("rb") as source, ice.io.new_output(target).create(overwrite=True) as sink:  # a new name
        shutil.copyfileobj(source, sink, COPY_CHUNK)
    staged.unlink()
    return target


def _file_location(path: Path) -> str:
    """A local directory as the file: location pyiceberg writes under. Not percent-encoded: the tables' FileIO
    (iceberg_io.py, fsspec's local filesystem) takes a location's path as it is written, so `%2B` for a `+` in the
    path would name another directory."""
    return f"file://{path}"


def _local_path(location: str) -> Path | None:
    """The file a file: location names, read as the tables' FileIO reads it (no percent-decoding); None for object
    storage."""
    if not location.startswith("file:"):
        return None
    return Path(location.removeprefix("file://") if location.startswith("file://") else location.removeprefix("file:"))


def _damage(ice: Table, remote: bool) -> str:
    """What is wrong with the current snapshot's data files, "" when nothing: each must be there with the size
    the table recorded. Files on a local disk are always checked (a stat each); on object storage (a request
    each) only when `remote`."""
    damaged = [
        task.file.file_path
        for task in ice.scan().plan_files()
        if not _whole(ice, task.file.file_path, task.file.file_size_in_bytes, remote)
    ]
    if not damaged:
        return ""
    reason = f"{len(damaged)} data file(s) missing or damaged, e.g. {damaged[0]}"
    log.warning("iceberg %s: %s; rewritten whole from the warehouse", ".".join(ice.name()), reason)
    return reason


def _whole(ice: Table, path: str, size: int, remote: bool) -> bool:
    """Whether the data file at `path` is there with its recorded `size`: on a local disk always checked (a stat),
    on object storage only when `remote` (a request; True otherwise)."""
    local = _local_path(path)
    if local is not None:
        return _local_file_whole(local, size)
    if not remote:
        return True
    source = ice.io.new_input(path)
    return source.exists() and len(source) == size


def _local_file_whole(local: Path | None, size: int) -> bool:
    """Whether a file on the local disk is there with `size` bytes; True for one elsewhere (None: not local)."""
    return local is None or (local.is_file() and local.stat().st_size == size)


def _is_damage(error: BaseException) -> bool:
    """An error reading one of the table's files: gone (OSError), not what it should be (a metadata file that does
    not parse, a Parquet file DuckDB or Arrow cannot read)."""
    return isinstance(error, OSError | ValueError | duckdb.IOException | duckdb.InvalidInputException)


def _is_catalog_error(error: BaseException) -> bool:
    """An error of the catalog's database (locked, unreachable), not of one table's files."""
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, SQLAlchemyError | sqlite3.Error)


def _logged(stats: MirrorStats, started: float) -> MirrorStats:
    """`stats` with the seconds since `started`, logged when the table was written."""
    stats.seconds = time.perf_counter() - started
    if stats.wrote:
        log.info(
            "iceberg %s: %d rows written, %d keys replaced%s%s in %.2fs",
            stats.table,
            stats.rows_written,
            stats.keys_deleted,
            " (whole table)" if stats.rewritten else "",
            " (its files written while it was fetched)" if stats.written_while_fetched else "",
            stats.seconds,
        )
    return stats


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]


def _loaded_through(ice: Table) -> datetime | None:
    snapshot = ice.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    value = snapshot.summary.get(LOADED_THROUGH)
    return datetime.fromisoformat(value) if value else None


def _iceberg_rows(ice: Table) -> int:
    snapshot = ice.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.get("total-records") or 0)


def _latest_load_time(conn: duckdb.DuckDBPyConnection) -> datetime | None:
    latest = scalar(conn, f"SELECT max(committed_at) FROM {SCHEMA}._load_runs")
    return latest if isinstance(latest, datetime) else None


def _changed_since(
    conn: duckdb.DuckDBPyConnection, name: str, since: datetime, kinds: tuple[str, ...] = ROW_CHANGES
) -> bool:
    """Whether any load after `since` changed rows of the table in one of the ways `kinds` (its recorded counts)."""
    return _rows_changed_since(conn, name, since, kinds) > 0


def _rows_changed_since(
    conn: duckdb.DuckDBPyConnection, name: str, since: datetime, kinds: tuple[str, ...] = ROW_CHANGES
) -> int:
    """The rows of the table the loads after `since` changed in the ways `kinds`, by their recorded counts (a row two
    loads changed counts twice)."""
    query = f"SELECT tables FROM {SCHEMA}._load_runs WHERE committed_at > ?"
    counts = (json.loads(tables).get(name) or {} for (tables,) in conn.execute(query, [since]).fetchall())
    return sum(int(table.get(kind) or 0) for table in counts for kind in kinds)


def _last_changes(
    conn: duckdb.DuckDBPyConnection, since: datetime, kinds: tuple[str, ...] = ROW_CHANGES
) -> dict[str, datetime]:
    """Per table, the time of the newest load after `since` that changed its rows in one of the ways `kinds`."""
    changed: dict[str, datetime] = {}
    query = f"SELECT committed_at, tables FROM {SCHEMA}._load_runs WHERE committed_at > ? ORDER BY committed_at"
    for committed_at, tables in conn.execute(query, [since]).fetchall():
        for name in changed_tables(json.loads(tables), kinds):
            changed[name] = committed_at
    return changed


def _current_by_record(
    conn: duckdb.DuckDBPyConnection, mirror_id: str, names: Collection[str] | None = None
) -> dict[TableDef, int]:
    """The tables (-> rows; of `names` only, when given) whose Iceberg table the record shows equal to the warehouse
    now: no load changed them after the recorded load time, and they hold the recorded rows and columns. Each table
    asked about costs a count, so the background mirror, which asks after each commit, asks for its tables only."""
    _ensure_record(conn)
    query = (
        f"SELECT table_name, loaded_through, row_count, columns FROM {MIRROR_RECORD} WHERE mirror = ? "
        "AND NOT starts_with(table_name, ?)"
    )
    recorded = {
        name: (through, rows, cols)
        for name, through, rows, cols in conn.execute(query, [mirror_id, MART_RECORD_PREFIX]).fetchall()
        if names is None or name in names
    }
    if not recorded:
        return {}
    changed = _last_changes(conn, min(through for through, _, _ in recorded.values()))
    current = {}
    for table in read_catalog(conn):
        if table.name not in recorded:
            continue
        through, rows, columns = recorded[table.name]
        if (
            columns == _columns_signature(table)
            and (table.name not in changed or changed[table.name] <= through)
            and _count(conn, f"{SCHEMA}.{q(table.name)}") == rows
        ):
            current[table] = rows
    return current


def _record(conn: duckdb.DuckDBPyConnection, mirror_id: str, seen: Mapping[TableDef, tuple[datetime, int]]) -> None:
    """Record that each table's Iceberg table holds the warehouse table as of that load time, with that many rows."""
    rows = [
        (mirror_id, table.name, through, count, _columns_signature(table)) for table, (through, count) in seen.items()
    ]
    if not rows:
        return
    _ensure_record(conn)
    values = ", ".join("(?, ?, ?::TIMESTAMPTZ, ?, ?)" for _ in rows)  # one statement: one transaction
    conn.execute(f"INSERT OR REPLACE INTO {MIRROR_RECORD} VALUES {values}", [v for row in rows for v in row])


def _record_files(conn: duckdb.DuckDBPyConnection, mirror_id: str, name: str, ice: Table) -> None:
    """Record the data files of `ice`'s current snapshot (none without one) under the record's `name` (a raw table's,
    or analytics.<mart>), beside the metadata file that holds them."""
    files = [{"path": task.file.file_path, "size": task.file.file_size_in_bytes} for task in ice.scan().plan_files()]
    _ensure_record(conn)
    row = [mirror_id, name, ice.metadata_location, files]
    conn.execute(f"INSERT OR REPLACE INTO {MIRROR_FILES} VALUES (?, ?, ?, ?)", row)


def _whole_by_record(conn: duckdb.DuckDBPyConnection, mirror_id: str, names: Mapping[str, str | None]) -> set[str]:
    """Of the record's `names` (-> the metadata file a SQLite catalog registers for it; None when the catalog is
    not read), those whose recorded data files are each there with their recorded size: a file on a local disk is
    stat'ed, one on object storage taken as recorded (`tables maintain` reads those). A name without recorded files,
    or with files recorded beside another metadata file than the catalog's, is not vouched for: its table is opened,
    checked and its files recorded."""
    if not names:
        return set()
    query = (
        f"SELECT table_name, metadata_location, data_files FROM {MIRROR_FILES} "
        "WHERE mirror = ? AND list_contains(?, table_name)"
    )
    whole = set()
    for name, location, files in conn.execute(query, [mirror_id, sorted(names)]).fetchall():
        registered = names[name]
        if registered is not None and registered != location:
            continue
        if all(_local_file_whole(_local_path(f["path"]), f["size"]) for f in files):
            whole.add(name)
    return whole


def _rows_digest(conn: duckdb.DuckDBPyConnection, select: str) -> str:
    """The query's row count and the XOR of its rows' digests: a mart's snapshot summary (CONTENT_DIGEST)."""
    return str(scalar(conn, f"SELECT count(*) || ':' || coalesce(bit_xor(d), 0) FROM ({_digests(conn, select)})"))


def _mart_state(conn: duckdb.DuckDBPyConnection, name: str, relation: str, rows_digest: str) -> str:
    """What a mart's Iceberg table must equal, as one digest: its columns and their types, their descriptions (its
    fields' docs) and its rows."""
    parts = [_column_types(conn, f"SELECT * FROM {relation}"), _column_docs(conn, (MARTS_NAMESPACE, name)), rows_digest]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _mart_records(conn: duckdb.DuckDBPyConnection, mirror_id: str) -> dict[str, str]:
    """Each mart's recorded state (`_mart_state` when its Iceberg table was last written or checked)."""
    _ensure_record(conn)
    query = f"SELECT table_name, columns FROM {MIRROR_RECORD} WHERE mirror = ? AND starts_with(table_name, ?)"
    rows = conn.execute(query, [mirror_id, MART_RECORD_PREFIX]).fetchall()
    return {name.removeprefix(MART_RECORD_PREFIX): state.removeprefix(MART_STATE) for name, state in rows}


def _record_mart(conn: duckdb.DuckDBPyConnection, mirror_id: str, name: str, state: str, rows: int) -> None:
    """Record that the mart's Iceberg table holds `state`; in the raw tables' record, its name namespaced (no raw
    table has a dot in its name) and its state where a raw table keeps its columns, so the record's columns stay
    the ones every version writes."""
    _ensure_record(conn)
    row = [mirror_id, MART_RECORD_PREFIX + name, datetime.now(UTC), rows, MART_STATE + state]
    conn.execute(f"INSERT OR REPLACE INTO {MIRROR_RECORD} VALUES (?, ?, ?::TIMESTAMPTZ, ?, ?)", row)


def _ensure_record(conn: duckdb.DuckDBPyConnection) -> None:
    """The record tables, described like the warehouse's other internal tables (the mirror step may create it after
    the run's last schema change, which is when the warehouse describes its tables). Nothing when they exist: the
    background mirror asks while commits run on other connections, and a catalog change there and here would
    conflict."""
    exists = (
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND list_contains(?, table_name)"
    )
    if scalar(conn, exists, [SCHEMA, [MIRROR_RECORD.split(".")[-1], MIRROR_FILES.split(".")[-1]]]) == 2:
        return
    conn.execute(MIRROR_RECORD_DDL)
    conn.execute(MIRROR_FILES_DDL)
    set_comments(conn, [])


def _columns_signature(table: TableDef) -> str:
    return ",".join(f"{name} {kind}" for name, kind in table.columns)


def _count(conn: duckdb.DuckDBPyConnection, relation: str, params: Mapping[str, object] | None = None) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {relation}", params).fetchall()[0][0])


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
