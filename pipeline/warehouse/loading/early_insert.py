"""A first load inserted while it is still being written. Its commit (commit.py) is one transaction as always,
but that transaction opens before the fetch ends: every lake part the load closes goes into its empty table at
once, so what is left after the last page is the last part, the duplicate-key check, and the rest of the commit.

Why it is exact: the rows that go in are those of the parts the manifest names, through the same SQL as
upsert.insert_first_load (a replay or a rebuild reads the same parts into the same rows), and only while the
table was empty when the transaction began, so every row is an insert. A key written twice in the load (a drift
re-fetch) cannot be told from the parts seen so far: the commit finds it over every part, takes the load's rows
out again and inserts them the ordinary way, deduped. A crash before COMMIT loses the transaction and nothing
else, as any crash before the commit point does (the parts are in no manifest).

With an Iceberg mirror, each part inserted is also written as the mirror's data files (lake/first_load_files.py),
offered to the mirror once the load has committed: the table's first Iceberg snapshot is written beside the fetch,
not after it. Writing them is a bulkhead: a failure only leaves the mirror to write the table from the warehouse.
A load too large to insert beside its fetch (`inserts=False`) only has its mirror files written meanwhile: its
transaction is begun the same way, so that its load time is fixed before the first file carries it, and the commit
inserts every part, as the ordinary first load does.

What it holds: the connection and its open transaction, from the start of the wait to the commit. That is the
file's write lock for the whole fetch, which the step holds the warehouse pool for anyway; nobody else in the
process writes the file meanwhile (the in-process executor runs one step at a time). Any error of an early insert
ends it (rolled back, logged by the caller) and the commit inserts the whole load as it always did, raising the
same error there if it is the load's."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from pipeline.contract.tables import TableSpec
from pipeline.warehouse import hooks
from pipeline.warehouse.duck.arrow_types import q, ts_literal
from pipeline.warehouse.duck.connection import scalar
from pipeline.warehouse.duck.schema import ensure_tables, table_def, table_ref
from pipeline.warehouse.duck.tabledef import FIRST_LOADED_AT, LAST_LOADED_AT, TableDef
from pipeline.warehouse.lake.first_load_files import FirstLoadFiles, offer
from pipeline.warehouse.lake.iceberg import staging_dir, write_first_load_files
from pipeline.warehouse.lake.lake import DUCKDB_ROW_GROUP_ROWS, check_parts
from pipeline.warehouse.lake.manifest import TableLoad
from pipeline.warehouse.loading.load import Load, table_load
from pipeline.warehouse.merge.recovery import recover
from pipeline.warehouse.merge.staging import Stage, deduped_sql, duplicate_keys_of, target_is_empty, values_must_fit
from pipeline.warehouse.merge.state import ensure_state_tables, next_load_time
from pipeline.warehouse.merge.upsert import insert_parts

# Rows per lake part of a load inserted early: what is left to insert after the last page is at most one part a
# table, against up to 1M rows at the warehouse's default part size. Whole DuckDB row groups: a statement that
# leaves one partly filled before the next one's rows makes the commit's checkpoint rewrite the table.
EARLY_PART_ROWS = DUCKDB_ROW_GROUP_ROWS
INSERT_EVERY_SECONDS = 0.2  # how often the inserting thread looks for parts closed since
# The inserting thread's niceness, and DuckDB on one thread (the calling one) meanwhile, so that the fetch beside it
# keeps the CPU it needs: on 2 cores, inserts on both of them at normal priority slow the fetch by as much as they
# save after its last page.
INSERT_NICENESS = 19
# DuckDB's memory limit while the inserts run beside the fetch, whose buffers and decode worker add up with it: the
# inserts stream one part at a time. A window as large as a large full sync's is not inserted early at all
# (progress/assets.py): its memory would add up with the fetch's.
INSERT_MEMORY_LIMIT = "64MiB"

log = logging.getLogger(__name__)


@dataclass
class _MirrorFiles:
    """One table's data files written so far for the Iceberg mirror (lake/first_load_files.py)."""

    directory: Path
    files: list[Path] = field(default_factory=list)
    rows: int = 0
    columns: tuple[str, ...] = ()


class EarlyFirstLoad:
    """The open transaction of `load`'s commit, holding the parts of `specs`' tables inserted so far."""

    def __init__(
        self,
        conn: duckdb.DuckDBPyConnection,
        load: Load,
        targets: dict[str, TableDef],
        specs: Sequence[TableSpec],
        loaded_at: datetime,
        *,
        inserts: bool = True,
    ) -> None:
        self.conn = conn
        self.load = load
        self.loaded_at = loaded_at  # the load's time: its rows and mirror files carry it from the first written
        # False: the parts are only written as mirror files while fetched, and inserted at the commit
        self.inserts = inserts
        self.error: BaseException | None = None  # what ended the early inserts, if anything did
        self._targets = targets
        self._specs = {spec.name: spec for spec in specs}
        # the parts inserted so far, and those written as mirror files, as check_parts names them, in the order written
        self._inserted: dict[str, list[str]] = {name: [] for name in self._specs}
        self._mirrored_parts: dict[str, list[str]] = {name: [] for name in self._specs}
        # their rows, inserted while the load was still written (insert_ready)
        self.rows_while_fetching: dict[str, int] = dict.fromkeys(self._specs, 0)
        # with an Iceberg mirror, the tables whose rows are written as its data files too (a failure takes one out)
        self._mirrored = set(self._specs) if load.warehouse.table_mirror is not None else set()
        self._mirror_files: dict[str, _MirrorFiles] = {}

    @classmethod
    def begin(
        cls, conn: duckdb.DuckDBPyConnection, load: Load, specs: Sequence[TableSpec], *, inserts: bool = True
    ) -> EarlyFirstLoad | None:
        """On `conn` (read-write, held until the commit): roll forward what a crash left, create or evolve the
        tables of `specs`, and BEGIN the load's transaction if every one of them is empty; None if one is not
        (the load is no first load, and nothing was begun), or if without `inserts` there is no mirror to write for."""
        warehouse = load.warehouse
        if not inserts and warehouse.table_mirror is None:
            return None
        ensure_state_tables(conn)
        recover(warehouse.commit_context(conn))
        conn.begin()
        try:
            targets = ensure_tables(conn, [table_def(spec) for spec in specs])
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        if not all(target_is_empty(conn, targets[spec.name]) for spec in specs):
            return None
        loaded_at = next_load_time(conn, warehouse.clock())
        conn.begin()
        hooks.reached("early_begun")
        return cls(conn, load, targets, specs, loaded_at, inserts=inserts)

    @property
    def open(self) -> bool:
        return self.error is None

    def start(self) -> None:
        """Insert the parts as they close, in a thread of low priority, with DuckDB on that one thread, until
        stop()."""
        # both global to the database: nothing else of this process uses it now
        self._settings = {
            name: scalar(self.conn, f"SELECT current_setting('{name}')") for name in ("threads", "memory_limit")
        }
        self.conn.execute("SET threads = 1")
        self.conn.execute(f"SET memory_limit = '{INSERT_MEMORY_LIMIT}'")
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._insert_until_stopped, name="lessonsync-early-insert", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Wait for the insert running, if any, and give DuckDB its threads back (from this thread: DuckDB's new
        worker threads get its priority, not the inserting thread's)."""
        self._stopping.set()
        self._thread.join()
        with suppress(duckdb.Error):  # a connection closed under it (a run stopped): nothing to set back
            self.conn.execute(f"SET threads = {int(self._settings['threads'])}")
            self.conn.execute(f"SET memory_limit = '{self._settings['memory_limit']}'")

    def _insert_until_stopped(self) -> None:
        with suppress(OSError):  # raising the niceness is always allowed; a platform without it keeps the default
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), INSERT_NICENESS)
        while not self._stopping.wait(INSERT_EVERY_SECONDS):
            self.insert_ready()

    def insert_ready(self) -> None:
        """Insert every part the load closed since the last call (without `inserts`: write it as mirror files only).
        An error ends the early inserts: the transaction is rolled back and `error` keeps what happened."""
        if not self.open:
            return
        try:
            for name, spec in self._specs.items():
                done = self._inserted[name] if self.inserts else self._mirrored_parts[name]
                parts = self.load.closed_parts(name)[len(done) :]
                if not parts or not (self.inserts or name in self._mirrored):
                    continue
                if self.load.specs.get(name) != spec:
                    raise ValueError(f"table {name} is written with another spec than the one it was begun with")
                files = check_parts(self.load.warehouse.lake, parts, f"load {self.load.load_id}", self.conn)
                load = table_load(spec, ())
                if self.inserts:
                    target = self._targets[name]
                    self.rows_while_fetching[name] += insert_parts(self.conn, load, target, files, self._ts)
                    self._inserted[name].extend(files)
                self._write_mirror_files(load, files)
                hooks.reached(f"early_inserted:{name}")
        except Exception as error:  # whatever it was, the commit can still insert the load the ordinary way
            self.error = error
            with suppress(duckdb.Error):  # no transaction left to roll back
                self.conn.rollback()
            self.discard_mirror_files()

    def holds(self, table: str) -> bool:
        """Whether `table`'s rows of this load go in through this transaction: those not inserted yet (all of them
        without `inserts`) the commit inserts (stage)."""
        return self.open and table in self._specs

    def stage(self, load: TableLoad, target: TableDef, files: list[str]) -> Stage:
        """At the commit, in its transaction: the parts of `files` not inserted yet go in, then the load's rows
        stand as its first load (the same rows and count as upsert.insert_first_load's), unless a key occurs twice
        in the load: then they are taken out and inserted as that function does, deduped."""
        early = self._inserted[load.name]
        with values_must_fit(load):
            if early != files[: len(early)]:  # cannot happen while parts are only ever added; then start over
                self.take_out(load.name)
                early = []
            mirrored = self._mirrored_parts[load.name]
            if mirrored != files[: len(mirrored)]:
                self._delete_mirror_files(load.name)
                mirrored = []
            rest = files[len(early) :]
            inserted = self.rows_while_fetching[load.name]
            if rest:
                inserted += insert_parts(self.conn, load, target, rest, self._ts)
            self._write_mirror_files(load, files[len(mirrored) :])
            with duplicate_keys_of(self.conn, load, target, files) as duplicates:
                if duplicates is not None:
                    self.take_out(load.name)
                    self._mirrored.discard(load.name)  # its rows are deduped now: the mirror writes them itself
                    inserted = insert_parts(self.conn, load, target, files, self._ts, duplicates)
        return Stage(f"_stage_{load.name}", load, target, True, inserted)

    def take_out(self, table: str) -> None:
        """Delete the rows inserted early: the table is empty again within the transaction."""
        self.conn.execute(f"DELETE FROM {table_ref(table)}")
        self._inserted[table], self.rows_while_fetching[table] = [], 0
        self._delete_mirror_files(table)

    def committed(self) -> None:
        """The load's transaction committed: each table's mirror files are offered to the mirror."""
        for table in [t for t, written in self._mirror_files.items() if written.rows]:
            written = self._mirror_files.pop(table)
            files = tuple(written.files)
            offer(
                self.load.warehouse.path,
                FirstLoadFiles(table, written.directory, files, written.rows, written.columns, self.loaded_at),
            )
        self.discard_mirror_files()  # the directories of tables with no rows

    def discard_mirror_files(self) -> None:
        """Delete the mirror files not offered (the load did not commit, or they were not its rows)."""
        for table in list(self._mirror_files):
            self._delete_mirror_files(table)

    def _write_mirror_files(self, load: TableLoad, files: list[str]) -> None:
        """The rows of `files` the load inserts, also as the Iceberg mirror's data files (module docstring)."""
        if load.name not in self._mirrored or not files:
            return
        target = self._targets[load.name]
        try:
            written = self._mirror_files.get(load.name)
            if written is None:
                prefix = f"lessonsync-iceberg-{load.name}-"
                written = _MirrorFiles(Path(tempfile.mkdtemp(prefix=prefix, dir=staging_dir(self.conn))))
                self._mirror_files[load.name] = written
            part = written.directory / f"part{len(written.files):06d}"
            relation = _table_rows(load, target, self._ts)
            files_written, rows, columns = write_first_load_files(self.conn, relation, {"files": files}, target, part)
        except Exception as error:  # a bulkhead: the mirror writes the table from the warehouse after the commit
            log.info("%s: not written for the Iceberg mirror while fetched (%s)", load.name, error)
            self._mirrored.discard(load.name)
            self._delete_mirror_files(load.name)
            return
        written.files.extend(files_written)
        written.rows += rows
        written.columns = columns
        self._mirrored_parts[load.name].extend(files)

    def _delete_mirror_files(self, table: str) -> None:
        self._mirrored_parts[table] = []
        written = self._mirror_files.pop(table, None)
        if written is not None:
            shutil.rmtree(written.directory, ignore_errors=True)

    @property
    def _ts(self) -> str:
        return ts_literal(self.loaded_at)


def _table_rows(load: TableLoad, target: TableDef, ts: str) -> str:
    """The rows insert_parts inserts from the parts (parameter $files), every key once, with each column of `target`:
    the load's, the load time in first_loaded_at and last_loaded_at, NULL in the others (a new table's)."""
    loaded = set(load.columns)
    columns = [
        q(name)
        if name in loaded
        else f"{ts} AS {q(name)}"
        if name in (FIRST_LOADED_AT, LAST_LOADED_AT)
        else f"CAST(NULL AS {kind}) AS {q(name)}"
        for name, kind in target.columns
    ]
    return f"SELECT {', '.join(columns)} FROM ({deduped_sql(load, target, None)})"
