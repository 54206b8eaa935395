"""The Iceberg mirror of each stream's tables, brought up to the warehouse on a background thread as soon as the
stream has committed, while the run's other streams still fetch (pipeline/raw/runner.py feeds it).

One thread, one table at a time, on a DuckDB connection of its own (`Warehouse.private_connection`), opened when
the run starts and held until the thread ends: the same database instance as the commits, so DuckDB's MVCC keeps
them apart. (Opened later, it could meet the instance with settings a first load's early insert changed, which
DuckDB refuses to open a connection beside; held, it keeps the one instance of the run open, which also saves the
commits reopening the file.) The mirror reads committed tables and writes
only its record (`lms._iceberg_mirrored`, created before the first fetch), which no commit writes; a table it
brings up records the load time it read before the table's rows, so the record is never ahead of the Iceberg table.
Its thread runs at the lowest CPU priority: on a loaded machine the fetches and commits come first.

It is a bulkhead like the mirror step: whatever fails in it is logged as a WARNING and never reaches the raw step;
the table stays behind for `lake/iceberg_tables`, which heals and reports it. After the last commit the worker brings
up every table the record cannot vouch for (as the mirror step would), while the raw step ends: the mirror of the
last stream's tables is not part of the raw step's time. The next step of the run that writes the warehouse (every
run executes in-process: the same process) waits for it first (`await_background_mirror`), so nothing else writes
or checkpoints the file beside it, and the mirror step then finds every table current by the record; a step that
only reads (the webhook tables' checks) pauses it instead (`background_mirror_paused`)."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from pipeline.warehouse import CatalogUnavailable, MirrorStats, Warehouse, discard_first_load_files, reached

log = logging.getLogger("lessonsync.mirror")  # a managed logger: its lines reach the run's event log
NICENESS = 19  # the mirror's thread yields the CPU to the fetches and commits beside it
_CATCH_UP = "<catch-up>"  # the queue's last item: every table the record cannot vouch for, after the last commit
_STOP = "<stop>"  # the run stopped early: nothing more is started


@dataclass
class BackgroundMirror:
    """What the background mirror of one run did, for the step that waits for it."""

    written: list[str] = field(default_factory=list)  # namespace.table brought up (rows written or rewritten)
    checked: int = 0  # tables opened or vouched for by the record
    failed: dict[str, str] = field(default_factory=dict)  # namespace.table (or "catalog") -> why it is behind
    seconds: float = 0.0  # spent mirroring
    finished_at: float = 0.0  # time.time() when its thread ended


class MirrorWorker:
    """The background mirror of one raw sync: `committed(tables)` after each commit, `finish()` after the last
    (or `stop()` when the run ends early); `paused()` around the raw step's own DuckDB work. Registered per
    warehouse file until a step collects it."""

    def __init__(self, warehouse: Warehouse, conn: duckdb.DuckDBPyConnection, connection: ExitStack) -> None:
        mirror = warehouse.table_mirror
        assert mirror is not None, "a background mirror needs the warehouse's Iceberg mirror"
        self.warehouse, self.mirror, self.conn = warehouse, mirror, conn
        self.report = BackgroundMirror()
        self._connection = connection  # closes `conn` when the thread ends
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._turn = threading.Condition()  # guards _pauses and _busy
        self._pauses = 0
        self._busy = False
        self.told_to_end = False  # finish() or stop() was called: by the raw step, or by the next one (orphaned)
        # A daemon: a run that ends without telling it (a step failed under Dagster's own storage, e.g. a full disk)
        # must not hold its process open; a mirror cut short is healed by the next run (docs/lake-tables.md).
        self._thread = threading.Thread(target=self._run, name="lessonsync-iceberg-mirror", daemon=True)

    @classmethod
    def start(cls, warehouse: Warehouse, opened: duckdb.DuckDBPyConnection) -> MirrorWorker | None:
        """A running worker for `warehouse`, registered in place of one a previous run left (waited for first);
        None when the warehouse keeps no Iceberg mirror. `opened`: a connection of the run, on this thread, to the
        instance the worker's own connection joins (its record table is created on it, before any commit)."""
        mirror = warehouse.table_mirror
        if mirror is None:
            return None
        await_background_mirror(warehouse.path, collect=True)
        connection = ExitStack()
        try:
            mirror.prepare(opened)
            conn = connection.enter_context(warehouse.private_connection())
        except Exception as error:  # a bulkhead: the raw step goes on, the mirror step does the mirroring
            log.warning(f"background Iceberg mirror not started ({type(error).__name__}: {error})")
            return None
        # The catalog (pyiceberg's SqlCatalog) imports SQLAlchemy's ORM, which registers an inspection hook for every
        # object before the `orm.exc` it names is complete. Imported on the worker's thread, that moment fails any
        # statement this thread builds meanwhile (Dagster's event log binds an enum): so it is imported here, first.
        import sqlalchemy.orm  # noqa: F401

        worker = cls(warehouse, conn, connection)
        with _registry_lock:
            _registry[_key(warehouse.path)] = worker
        worker._thread.start()
        return worker

    def committed(self, tables: Iterable[str]) -> None:
        """Mirror these tables (of a stream just committed) when the thread gets to them, one at a time."""
        for table in tables:
            self._queue.put(table)

    def finish(self) -> None:
        """Every commit of the run is made: after what is queued, every table the record cannot vouch for."""
        self.told_to_end = True
        self._queue.put(_CATCH_UP)

    def stop(self) -> None:
        """The run ended early: the table in progress is finished, nothing more started (the next mirror run
        brings up the rest); a table held back by a pause is not started either."""
        self.told_to_end = True
        self._stopped.set()
        self._queue.put(_STOP)
        with self._turn:
            self._turn.notify_all()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Within the block no table is started, and the block begins once the table in progress is done: a commit
        and the checks after it never share DuckDB's memory and the cores with a mirror write."""
        self.hold()
        with self._turn:
            while self._busy:
                self._turn.wait()
        try:
            yield
        finally:
            self.release()

    def hold(self) -> None:
        """No table is started until as many release(); the table in progress, if any, goes on."""
        with self._turn:
            self._pauses += 1

    def release(self) -> None:
        with self._turn:
            self._pauses -= 1
            self._turn.notify_all()

    def join(self) -> BackgroundMirror:
        self._thread.join()
        return self.report

    def _run(self) -> None:
        with suppress(OSError):  # raising the niceness is always allowed; a platform without it keeps the default
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        try:
            while True:
                item = self._queue.get()
                if item == _STOP or self._stopped.is_set():
                    return
                with self._turn:  # the raw step's own DuckDB work first
                    while self._pauses and not self._stopped.is_set():
                        self._turn.wait()
                    if self._stopped.is_set():
                        return
                    self._busy = True
                try:
                    going_on = self._mirrored(item)
                finally:
                    with self._turn:
                        self._busy = False
                        self._turn.notify_all()
                reached(f"background_mirrored:{item}")
                if not going_on or item == _CATCH_UP:  # a catalog that failed fails every table
                    return
        except Exception as error:  # a bulkhead: whatever escapes the tables' own handling stays on this thread
            self._failed("remaining tables", f"{type(error).__name__}: {error}")
        finally:
            try:
                self.mirror.close()
            finally:
                self._connection.close()
                discard_first_load_files(self.warehouse.path)  # those of a table it did not get to
                self.report.finished_at = time.time()

    def _mirrored(self, item: str) -> bool:
        """Bring up one table (or, at the end, every table behind); False when the catalog cannot be used (no
        table can be: the mirror step reports it), or anything unexpected failed."""
        started = time.perf_counter()
        try:
            if item == _CATCH_UP:
                stats = self.mirror.sync_behind(self.conn)
            else:
                stats = self.mirror.sync_tables_behind(self.conn, [item])
        except CatalogUnavailable as error:
            self._failed("catalog", str(error))
            return False
        except Exception as error:  # a bulkhead: nothing of the mirror reaches the raw step
            self._failed(item, f"{type(error).__name__}: {error}")
            return False
        finally:
            self.report.seconds += time.perf_counter() - started
        self._note(stats)
        return True

    def _note(self, stats: list[MirrorStats]) -> None:
        self.report.checked += len(stats)
        for stat in stats:
            if stat.error:
                self._failed(stat.table, stat.error)
            elif stat.wrote:
                self.report.written.append(stat.table)

    def _failed(self, what: str, why: str) -> None:
        self.report.failed[what] = why
        log.warning(f"background Iceberg mirror: {what} not brought up ({why}); the mirror step tries again")


def await_background_mirror(warehouse_path: Path, *, collect: bool = False) -> BackgroundMirror | None:
    """Wait for the background mirror of the warehouse at `warehouse_path`, if one runs or ran in this process;
    its report, or None. `collect`: unregistered, so only one caller reports it (the mirror step)."""
    reached("background_mirror_awaited")
    with _registry_lock:
        worker = _registry.pop(_key(warehouse_path), None) if collect else _registry.get(_key(warehouse_path))
    if worker is None:
        return None
    if not worker.told_to_end:
        # Whoever waits runs after the raw step that started the worker: that step ended without ending it (it
        # failed outside its own code, e.g. under a full disk, and its generator was never closed). Waiting for
        # it would wait for ever; the mirror step brings up what it did not.
        log.warning(
            "background Iceberg mirror: its raw step ended without ending it; stopped (the mirror step "
            "brings up the rest)"
        )
        worker.stop()
    return worker.join()


@contextmanager
def background_mirror_paused(warehouse_path: Path) -> Iterator[None]:
    """Within the block the background mirror of this process's warehouse at `warehouse_path`, if one runs, starts
    no table (the one in progress is finished first): for a step that only reads the warehouse, which then need
    not wait for the whole mirror (its reads see committed data, DuckDB's MVCC, as the raw step's own checks do)."""
    with _registry_lock:
        worker = _registry.get(_key(warehouse_path))
    if worker is None:
        yield
        return
    reached("background_mirror_paused")
    with worker.paused():
        yield


_registry: dict[str, MirrorWorker] = {}  # warehouse file -> its last background mirror, until collected
_registry_lock = threading.Lock()


def _key(path: Path) -> str:
    return str(Path(path).resolve())
