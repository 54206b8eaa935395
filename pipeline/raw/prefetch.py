"""The first fetches of a `lessonsync sync` run, started when the command starts rather than when Dagster has
imported, built the definitions, created the run and reached the `lms_raw` step (seconds later).

`fetch_ahead` (called by the CLI before it imports Dagster) starts a thread that opens the platform client (the
token exchange and the first-page probe go out at once), reads from the warehouse the cursor and last load of each
stream it fetches and the columns discovered so far (read-only, never waiting for a lock: a warehouse in use means
no prefetch), and starts the fetches the step starts first, by their declarations' kind: the incremental streams
from their cursors and every snapshot, each into a load of the run's id, written to the lake as they arrive
(pipeline/raw/fetch.py), through the schema step the step's client would apply. It never writes DuckDB: the run's
single writer, taken after the pool wait, does.

The step adopts them (`take_prefetch`, then `Prefetch.adopt` once it has the warehouse) only when it would have
read exactly the same: the same run, settings, warehouse, streams and discovered columns, and, read on the step's
own connection after its recovery, the same cursor and last load of every prefetched stream (no run committed one
meanwhile) and so the same windows. Anything else discards the prefetch (its fetches cancelled, their lake parts
removed, its client closed) and the step fetches as it always does, with a client of its own. Runs the daemon
launches never have one (the registry is this process's)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING

from pipeline.logs import record_fields
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.contract.evolution import SchemaPolicy
    from pipeline.raw.commit import Log
    from pipeline.raw.fetch import BackgroundFetch
    from pipeline.raw.runner import RawRun
    from pipeline.raw.windows import Window
    from pipeline.source import PlatformClient
    from pipeline.warehouse import Warehouse

log = logging.getLogger("lessonsync.raw")

Marks = dict[str, tuple[datetime | None, int]]  # stream -> its stored cursor and last load's sequence number
Windows = dict[str, tuple["Window", datetime | None]]  # stream -> the window the step reads and its cursor
SOURCE_LOGGER = "lessonsync.source"  # the client's: progress, retries, drift, quarantine
HELD_RECORDS = 1_000  # the client's lines held for the step, the newest kept

_started: dict[str, Prefetch] = {}  # run id -> the prefetch of that run, until its step takes it or it is discarded
_registry = threading.Lock()


def fetch_ahead(settings: Settings, *, full_refresh: bool = False) -> Prefetch:
    """Start the first fetches of the run about to be created in this process (its id: `Prefetch.run_id`)."""
    from pipeline.memory import tune_process_memory

    tune_process_memory()  # binds the arenas of threads created after it: before the prefetch's (pipeline/memory.py)
    prefetch = Prefetch(settings, full_refresh=full_refresh)
    logging.getLogger(SOURCE_LOGGER).addFilter(prefetch.held)
    with _registry:
        _started[prefetch.run_id] = prefetch
    prefetch.start()
    return prefetch


def take_prefetch(
    run: RawRun, warehouse: Warehouse, settings: Settings, schema: SchemaPolicy, streams: Iterable[str], log: Log
) -> Prefetch | None:
    """The prefetch of `run` if this process started one that reads what the step would (its windows are checked
    later, by `adopt`); one that does not is discarded, said in one line."""
    with _registry:
        prefetch = _started.pop(run.run_id, None)
    if prefetch is None:
        return None
    prefetch.started()
    problem = prefetch.mismatch(run, warehouse, settings, schema, set(streams))
    if problem is not None:
        prefetch.discard(f"{problem}; the step fetches them itself", log)
        return None
    return prefetch


class Prefetch:
    """The first fetches of one run (the incremental streams and the snapshots), started in a thread of its own."""

    def __init__(self, settings: Settings, *, full_refresh: bool = False) -> None:
        # as RawSync keeps them: the page cache in the warehouse's directory
        self.settings = settings.model_copy(update={"data_dir": settings.warehouse_path.parent})
        self.run_id = str(uuid.uuid4())
        self.full_refresh = full_refresh
        self.began = time.monotonic()
        self.client: PlatformClient | None = None
        self.fetches: dict[str, BackgroundFetch] = {}
        self.marks: Marks = {}
        self.schema: SchemaPolicy | None = None  # the schema step its client applies (the warehouse's, when read)
        self.failure: str | None = None  # why nothing was started
        self._listener: Callable[[], None] | None = None  # told when a fetch ends, once adopted
        self.held = HeldLogs()
        self._lock = threading.Lock()
        self._closed = False  # adopted or discarded: nothing more to do here
        self._thread = threading.Thread(target=self._start, name="lessonsync-prefetch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def started(self) -> None:
        """Wait until the fetches have started (or the prefetch gave up): its look at the warehouse is over, so
        a step may open the file (one process may not hold it read-only and read-write at once)."""
        self._thread.join()

    def _start(self) -> None:
        try:
            self._fetch()
        except Exception as error:  # the step fetches as usual, and meets the same problem there if it lasts
            self.failure = f"{type(error).__name__}: {error}"
            log.info("not fetched ahead (%s); the run's raw step fetches as usual", self.failure)
            self._cancel_fetches(self.failure, log)
            self._close()

    def _fetch(self) -> None:
        from pipeline.source import PlatformClient

        settings = self.settings
        client = self.client = PlatformClient(settings, page_cache=settings.page_cache_dir)
        client.open()
        # The token exchange and the first-page probe, which every stream waits for, go out before anything else is
        # imported or opened (the warehouse, DuckDB).
        threading.Thread(target=_warm_up, args=(client,), name="lessonsync-prefetch-token", daemon=True).start()

        from pipeline.contract.streams import SYNC_STREAMS
        from pipeline.memory import keep_pandas_out
        from pipeline.raw.fetch import BackgroundFetch
        from pipeline.raw.runner import RawRun, schema_policy
        from pipeline.raw.windows import SNAPSHOT_WINDOW
        from pipeline.source import BACKGROUND, URGENT
        from pipeline.warehouse import Warehouse

        keep_pandas_out()  # before the first page is decoded (pipeline/memory.py)
        # The streams a run fetches first, in the step's order; a planned stream waits for its parent's commit.
        incremental = [s.name for s in SYNC_STREAMS.values() if s.kind == "incremental"]
        snapshots = [s.name for s in SYNC_STREAMS.values() if s.kind == "snapshot"]
        # Read-only, and never waiting: a warehouse another process holds is being written, so no prefetch.
        looking = Warehouse.from_settings(settings, lock_timeout=0.0)
        self.marks = looking.last_loads([*incremental, *snapshots])
        self.schema = schema_policy(settings.sync, looking.discovered_columns())
        client.use_schema(self.schema)
        warehouse = Warehouse.from_settings(settings)
        run = RawRun(self.run_id, full_refresh=self.full_refresh)
        plan = []
        for stream in incremental:
            cursor = self.marks.get(stream, (None, 0))[0]
            plan.append((stream, run.incremental_window(cursor, settings.sync), cursor, URGENT))
        plan += [(stream, SNAPSHOT_WINDOW, None, BACKGROUND) for stream in snapshots]
        with self._lock:
            if self._closed:  # discarded while starting
                return
            for stream, stream_window, stream_cursor, priority in plan:
                batches = client.iter_stream(stream, updated_since=stream_window.since)
                self.fetches[stream] = BackgroundFetch(
                    warehouse, client, stream, self.run_id, stream_window, stream_cursor, batches, priority,
                    on_end=self._ended,
                )  # fmt: skip

    def _ended(self) -> None:
        listener = self._listener
        if listener is not None:
            listener()

    def mismatch(
        self, run: RawRun, warehouse: Warehouse, settings: Settings, schema: SchemaPolicy, streams: set[str]
    ) -> str | None:
        """Why the step of `run` cannot adopt this prefetch, None when it can (the windows are `adopt`'s to check)."""
        from pipeline.raw.runner import RawRun

        if self.failure is not None:
            return f"it did not start ({self.failure})"
        if run != RawRun(self.run_id, full_refresh=self.full_refresh):
            return "the run reads other windows (a backfill, or another full-refresh flag)"
        if not set(self.fetches) <= streams:
            return f"the run does not sync {', '.join(sorted(set(self.fetches) - streams))}"
        if warehouse.path != self.settings.warehouse_path:
            return "the run's warehouse is another file"
        if differing := _fetch_settings_differing(settings, self.settings):
            return f"the run's settings differ ({', '.join(differing)})"  # names, never values
        # The step's streams share this client: a column another run discovered since, in any table (a stream not
        # fetched ahead too), must be known to its schema step, or that step would place the field otherwise.
        if schema != self.schema:
            return "the warehouse's discovered columns changed since (another run)"
        return None

    def adopt(
        self, warehouse: Warehouse, windows: Windows, on_end: Callable[[], None], log: Log
    ) -> dict[str, BackgroundFetch]:
        """The fetches, for the step to commit, if no load of their streams was committed since they were planned
        (read on `warehouse`, the step's, after its recovery: within its one connection) and each reads the window
        the step would (`windows`); else they are discarded, the client closed, and {} is returned. `on_end` is
        told whenever one of them ends from now on."""
        now = warehouse.last_loads(self.fetches)
        moved = sorted(s for s in self.fetches if now.get(s) != self.marks.get(s))
        other = sorted(s for s, f in self.fetches.items() if windows.get(s) != (f.window, f.cursor_before))
        if moved or other:
            why = f"{', '.join(moved)} committed a load since the fetch started ahead (another run)" if moved else ""
            why = why or f"the run reads other windows of {', '.join(other)}"
            self._cancel_fetches(f"{why}; the step fetches them itself", log)
            self._close()  # its client has seen pages no load commits: the step opens its own
            return {}
        with self._lock:
            self._closed = True
            self._listener = on_end
            fetches, self.fetches = self.fetches, {}
        for fetch in fetches.values():
            # committed through the step's warehouse (its one connection), an equal one: same settings, same files
            fetch.load.warehouse = warehouse
        states = ", ".join(f"{s} ({'fetched' if f.ended else 'fetching'})" for s, f in fetches.items())
        log.info(f"adopted the fetches started {time.monotonic() - self.began:.1f} s ago, with the command: {states}")
        self.held.release(log)  # what the client said of them meanwhile
        return fetches

    def discard(self, reason: str, log: Log | logging.Logger = log) -> None:
        """Cancel what was started (lake parts removed) and close the client; nothing if adopted or discarded."""
        with _registry:
            _started.pop(self.run_id, None)
        self.started()
        if self._closed:
            return
        self._cancel_fetches(reason, log)
        self._close()

    def _cancel_fetches(self, reason: str, log: Log | logging.Logger) -> None:
        with self._lock:
            self._closed = True
            fetches, self.fetches = self.fetches, {}
        for fetch in fetches.values():
            fetch.cancel()
        if fetches:  # the run reads those pages again
            log.warning(f"discarded the fetches started ahead ({', '.join(fetches)}): {reason}")
        self.held.release(log)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            client, self.client = self.client, None
        if client is not None:
            client.close()


class HeldLogs(logging.Filter):
    """On the client's logger while a prefetch is not yet adopted: its lines (any thread but the main one, where
    Dagster runs; the client's are the prefetch's until the step opens its own) are held, then said by the step
    (`release`), in its run's event log and on the console once, as a step that fetched them itself says them.
    Lines keep being held while the held ones are said, so the console shows every line in the order said."""

    def __init__(self) -> None:
        super().__init__()
        self.records: deque[logging.LogRecord] = deque(maxlen=HELD_RECORDS)
        self.dropped = 0  # the oldest lines the full deque let go
        self.released = False
        self._releasing = False
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if threading.current_thread() is threading.main_thread():
            return True
        with self._lock:
            if self.released:
                return True
            if len(self.records) == self.records.maxlen:
                self.dropped += 1
            self.records.append(record)
            return False

    def release(self, log: Log | logging.Logger) -> None:
        """Say the held lines through `log`, once, and those held while they are said; then the client's lines
        pass."""
        with self._lock:
            if self._releasing:
                return
            self._releasing = True
        while True:
            with self._lock:
                records, dropped = list(self.records), self.dropped
                self.records.clear()
                self.dropped = 0
                if not records and not dropped:
                    self.released = True
                    break
            if dropped:
                log.warning(f"{dropped} earlier line(s) of the fetches started ahead not shown")
            for record in records:  # with their fields (a retry's attempt and budget left, a stream's counts)
                say = log.warning if record.levelno >= logging.WARNING else log.info
                say(record.getMessage(), extra=record_fields(record))
        logging.getLogger(SOURCE_LOGGER).removeFilter(self)


def _warm_up(client: PlatformClient) -> None:
    """The token exchange and (LESSONSYNC_FIRST_PAGE=auto) the probe; a failure is the streams' to report."""
    try:
        client.first_page()
    except Exception as error:
        log.debug("warming up the client: %s", error)


def _fetch_settings_differing(run: Settings, ahead: Settings) -> list[str]:
    """The settings a fetch depends on that differ between the run and the fetch started ahead, by name: the
    client's, the sync's, the warehouse's, and where the lake keeps the parts it writes. The others (Dagster's
    storage, the Iceberg catalog, alerts) do not change what a fetch reads or writes, so a step that sees one of
    them rewritten since (the PostgreSQL URL given its driver) still adopts it."""
    differing = []
    for part in ("client", "sync", "warehouse"):
        mine, theirs = getattr(run, part), getattr(ahead, part)
        differing += [f.name for f in fields(mine) if getattr(mine, f.name) != getattr(theirs, f.name)]
    if run.lake.location != ahead.lake.location:
        differing.append("lake_url")
    return list(dict.fromkeys(differing))  # a setting two parts read (the lookback) is named once
