"""A fetched stream committed: its load and the stream's next cursor in one DuckDB transaction, the snapshot
tables closed only after a complete sweep, and what the commit did (`StreamLoad`) for the caller to report."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from pipeline.contract.evolution import DiscoveredColumn
from pipeline.contract.tables import TableSpec
from pipeline.raw.fetch import BackgroundFetch, Fetched
from pipeline.raw.windows import UNBOUNDED, Window, next_cursor
from pipeline.settings import SyncSettings
from pipeline.source import RunStats, release_free_memory
from pipeline.warehouse import (
    EarlyFirstLoad,
    Load,
    LoadResult,
    Warehouse,
    WarehouseLockedError,
    content_versions,
    discovered_columns,
    row_count,
)

# A full collection costs ~0.2 s in a process holding Dagster and DuckDB: worth it before the commit of a big
# fetch (the pages are in the lake; DuckDB gets the memory), not after a small snapshot.
RELEASE_AFTER_ROWS = 1_000_000


class Log(Protocol):
    """Where the runner says what it does: Dagster's `context.log` in a run, a `logging.Logger` elsewhere."""

    def info(self, msg: str, *args: object, extra: Mapping[str, object] | None = None) -> None: ...

    def warning(self, msg: str, *args: object, extra: Mapping[str, object] | None = None) -> None: ...


@dataclass(frozen=True)
class StreamLoad:
    """One committed stream: the warehouse's result, the client's statistics, and timings."""

    stream: str
    result: LoadResult
    stats: RunStats
    window: Window
    seconds: float  # from the fetch's start to the commit's end
    commit_seconds: float = 0.0  # of `seconds`: the DuckDB commit
    row_counts: dict[str, int] = field(default_factory=dict)  # live rows per table after the commit
    rows_while_fetching: dict[str, int] = field(default_factory=dict)  # a first load's rows inserted early
    extra: dict[str, object] = field(default_factory=dict)  # what the stream adds (the answers: their plan)
    # per table after the commit: the seq of the newest load that changed its rows (warehouse.content_versions)
    versions: dict[str, int] = field(default_factory=dict)
    # the columns of the counted tables that loads added for fields the platform began sending, this one's included
    discovered: tuple[DiscoveredColumn, ...] = ()

    @property
    def new_columns(self) -> tuple[DiscoveredColumn, ...]:
        """The columns this load added (first seen in it)."""
        return tuple(c for c in self.discovered if c.first_seen_load == self.result.seq)


def begin_early_insert(
    log: Log,
    warehouse: Warehouse,
    fetching: BackgroundFetch,
    specs: Iterable[TableSpec],
    holding: ExitStack,
    *,
    inserts: bool = True,
) -> EarlyFirstLoad | None:
    """The load's commit transaction begun now, on a connection `holding` keeps open, when the fetch still runs and
    `specs` are all empty tables (pipeline/warehouse/loading/early_insert.py); None otherwise (then nothing is held).
    Without `inserts`, only the Iceberg mirror's files are written meanwhile, and only when there is a mirror."""
    specs = tuple(specs)
    if not specs or fetching.ended or fetching.cursor_before is not None:
        return None
    with ExitStack() as attempt:
        try:
            early = EarlyFirstLoad.begin(
                attempt.enter_context(warehouse.one_connection()), fetching.load, specs, inserts=inserts
            )
        except WarehouseLockedError as error:  # another process has the file now: the commit waits for it later
            log.info(f"{fetching.stream}: not inserted while fetched ({error})")
            return None
        if early is None:
            return None
        attempt.callback(early.discard_mirror_files)  # those the commit did not offer to the mirror
        early.start()
        holding.push(attempt.pop_all())
    tables = ", ".join(s.name for s in specs)
    log.info(
        f"{fetching.stream}: a first load; its parts go into {tables} while they are fetched (one transaction, "
        "committed at the end)"
        if inserts
        else f"{fetching.stream}: a first load; its parts are written as the Iceberg mirror's files of {tables} "
        "while they are fetched, and inserted at the commit (too many rows to insert beside the fetch)"
    )
    return early


def commit_fetched(
    log: Log,
    warehouse: Warehouse,
    settings: SyncSettings,
    fetched: Fetched,
    *,
    early: EarlyFirstLoad | None = None,
    snapshot_tables: tuple[str, ...] = (),
    tables: Iterable[str] = (),
    before_commit: Callable[[Load, RunStats], None] | None = None,
    ceiling: datetime | None = UNBOUNDED,
) -> StreamLoad:
    """Commit `fetched` with its stream's next cursor (capped by `ceiling`: pipeline/raw/windows.py).
    `before_commit(load, stats)` may write more rows (sync state) into the same transaction. `tables` and
    `snapshot_tables` get their live row count and content version after the commit."""
    stream = fetched.load.stream
    if early is not None and early.error is not None:
        log.warning(
            f"{stream}: the rows inserted while fetching were rolled back ({early.error}); the commit inserts the "
            "whole load"
        )
    window, stats = fetched.window, fetched.stats
    with fetched.load as load:
        report_new_fields(log, stream, stats)
        server_start = stats.server_time_at_start or load.started_at  # our clock when no Date header came
        cursor = next_cursor(
            window,
            fetched.cursor_before,
            server_run_start=server_start,
            newest_listed=stats.newest_last_date,
            safety_margin=settings.safety_margin,
            complete=stats.complete,
            ceiling=ceiling,
        )
        if not window.moves_cursor and cursor != fetched.cursor_before:
            raise AssertionError(f"{stream}: a {window.label} window must leave the cursor where it is")
        if not stats.complete:
            log.warning(
                f"{stream}: page drift did not settle after {stats.passes} passes; the cursor stays where it was "
                "so the next run reads this window again"
            )
        complete = snapshot_tables_to_close(log, stream, snapshot_tables, stats)
        if before_commit is not None:
            before_commit(load, stats)
        if sum(stats.rows.values()) >= RELEASE_AFTER_ROWS:
            load.flush()  # the part writers' last row groups go to disk before the commit
            gc.collect()
            release_free_memory()
        committing = time.monotonic()
        with warehouse.one_connection() as conn:  # one open for the commit and the row counts after it
            result = load.commit(
                cursor=cursor,
                complete_snapshots=complete,
                stats=stats.as_metadata(),
                early=early,
                discovered=stats.new_columns,
            )
            done = time.monotonic()
            counted = sorted({*tables, *snapshot_tables})
            row_counts = {table: row_count(conn, table) for table in counted}
            versions = content_versions(conn, counted)
            discovered = tuple(c for c in discovered_columns(conn) if c.table in counted)
    for column in discovered:
        if column.first_seen_load == result.seq:
            log.warning(f"{stream}: {column.summary()}: {column.description} (docs/schema-evolution.md)")
    if result.repeat_of is not None:
        log.info(
            f"{stream}: the same snapshot as load {result.repeat_of}; its rows were neither compared again nor "
            "written (lms._snapshot_seen records that this load saw them)"
        )
    early_rows = early.rows_while_fetching if early is not None and early.open else {}
    return StreamLoad(
        stream,
        result,
        stats,
        window,
        done - fetched.started,
        done - committing,
        row_counts,
        early_rows,
        versions=versions,
        discovered=discovered,
    )


def snapshot_tables_to_close(
    log: Log, stream: str, snapshot_tables: tuple[str, ...], stats: RunStats
) -> tuple[str, ...]:
    """The snapshot tables whose unseen rows may be marked deleted: none unless every record was seen and
    loaded. A quarantined record was seen but not loaded: its key must not count as vanished."""
    if not snapshot_tables or (stats.complete and not stats.quarantined):
        return snapshot_tables
    if stats.quarantined:
        log.warning(
            f"{stream}: {stats.quarantined} record(s) quarantined (lms.quarantine); no row of "
            f"{', '.join(snapshot_tables)} is marked deleted this run"
        )
    return ()


def report_new_fields(log: Log, stream: str, stats: RunStats) -> None:
    """Once per stream and run: the fields the platform sent that our models do not declare and that stay in
    `extra` (the stream's contract is discard_value, or the field cannot be a column yet); those that became
    columns are reported with their load's number after the commit."""
    if stats.new_fields:
        listed = ", ".join(f"{path} ({count:,} records)" for path, count in sorted(stats.new_fields.items()))
        log.warning(
            f"{stream}: the platform sent {len(stats.new_fields)} field(s) the models do not declare, kept in the "
            f"rows' extra column: {listed}"
        )
