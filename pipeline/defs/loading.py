"""The one loop every sync asset runs: client batches -> one warehouse load -> one commit with the
stream's cursor, with progress in the logs and the numbers in the materialization metadata."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dagster import AssetExecutionContext, MetadataValue

from pipeline.contract.tables import TABLES, TableSpec
from pipeline.defs.common import Metadata
from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.windows import UNBOUNDED, Window, cursor_window, next_cursor
from pipeline.prefetch.background import BackgroundFetch, Fetched
from pipeline.prefetch.plan import start_prefetch
from pipeline.prefetch.runs import run_fetches, take_prefetched
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.decoding import Batch
from pipeline.source.fetching import release_free_memory
from pipeline.source.stats import RunStats, paths_of
from pipeline.warehouse import (
    Load,
    LoadResult,
    TableLoadStats,
    Warehouse,
    WarehouseLockedError,
    early_insert,
    row_count,
)
from pipeline.warehouse.early_insert import EarlyFirstLoad

PROGRESS_EVERY_S = 5.0
# A full collection costs a noticeable fraction of a second in a process holding Dagster and DuckDB: worth it
# before the commit of a big fetch (the sync's peak memory), not after every snapshot of small rows.
RELEASE_AFTER_ROWS = 1_000_000
FULL_REFRESH_TAG = "lessonsync/full-refresh"


@dataclass(frozen=True)
class StreamLoad:
    result: LoadResult
    stats: RunStats
    window: Window
    seconds: float
    commit_seconds: float = 0.0  # of `seconds`: the DuckDB commit (the rest is fetching and the lake)
    row_counts: dict[str, int] = field(default_factory=dict)  # live rows per table after the commit
    # rows per table inserted while the fetch still ran (a first load: pipeline/warehouse/early_insert.py)
    rows_while_fetching: dict[str, int] = field(default_factory=dict)


def window_for(
    context: AssetExecutionContext, cursor: datetime | None, settings: Settings, backfill: Window | None = None
) -> Window:
    """A backfill reads its range (pipeline/defs/progress/backfill.py); every other run (schedule, CLI, "Materialize",
    full refresh) reads from the cursor."""
    if backfill is not None:
        return backfill
    return cursor_window(cursor, settings.lookback, full_refresh=context.run.tags.get(FULL_REFRESH_TAG) == "true")


def load_stream(
    context: AssetExecutionContext,
    warehouse: Warehouse,
    client: PlatformClient,
    stream: str,
    fetch: Callable[[Window], Iterable[Batch]],
    *,
    window: Window | None = None,
    backfill: Window | None = None,
    snapshot_tables: Iterable[str] = (),
    before_commit: Callable[[Load, RunStats], None] | None = None,
    also_tables: Iterable[TableSpec] = (),
    cursor_ceiling: Callable[[], datetime | None] | None = None,
    tables: Iterable[str] = (),
    early_tables: Callable[[], Sequence[TableSpec]] | None = None,
) -> StreamLoad:
    """Fetch `stream` for its window and commit it with the cursor in one transaction. `snapshot_tables`
    were pulled whole: their rows not seen are marked deleted, but only after a complete sweep.
    `window` fixes the window (snapshots); `backfill` is the run's backfill range, if any (else the cursor's).
    `before_commit(load, stats)` may write more rows (sync state) to commit in the same transaction.
    `cursor_ceiling()`, read after the fetch, caps the cursor (pipeline/defs/windows.py: the answers' one).
    `tables` (and `snapshot_tables`) get their live row count after the commit (dagster/row_count).
    `early_tables()`, asked once the fetch has started: tables whose first load goes into DuckDB part by part while
    the fetch still runs, when they are all empty (pipeline/warehouse/early_insert.py); the step then holds the file
    from its wait to its commit.
    A stream the run's first step started fetching (sync_client) is taken as it is; otherwise, on one
    connection: every raw table (and `also_tables`) created or evolved, the cursor read and `fetch(window)`
    called (it may plan from the warehouse); its batches are read after the file is let go. Either way the
    batches go to the load's lake parts in a background thread (pipeline/prefetch) and this step commits."""
    fetching = take_prefetched(context.run.run_id, stream)
    if fetching is None:
        with warehouse.one_connection():
            warehouse.ensure_tables([*TABLES.values(), *also_tables])
            cursor_before = warehouse.cursor(stream)
            window = window or window_for(context, cursor_before, client.settings, backfill)
            context.log.info(f"{stream}: reading {window.describe()}")
            fetching = BackgroundFetch(
                warehouse,
                client,
                stream,
                context.run.run_id,
                window,
                cursor_before,
                fetch(window),
                part_rows=early_insert.EARLY_PART_ROWS if early_tables else None,
            )
    else:  # its tables were created by the run's first step (start_prefetch); the commit evolves its own anyway
        context.log.info(
            f"{stream}: reading {fetching.window.describe()} (fetched ahead: {fetching.pages:,} pages so far)"
        )
    with ExitStack() as holding:
        early = None
        try:
            early = _begin_early_insert(context, warehouse, fetching, early_tables, holding)
            fetched = fetching.wait(lambda f: _report_progress(context, f), PROGRESS_EVERY_S)
        except BaseException:
            fetching.cancel()  # a step stopped while waiting (run terminated): the fetch must not run on
            raise
        finally:
            if early is not None:
                early.stop()  # the commit finishes the inserts, on this thread
        return _commit_fetched(
            context, warehouse, client, stream, fetched, early, snapshot_tables, before_commit, cursor_ceiling, tables
        )


def _begin_early_insert(
    context: AssetExecutionContext,
    warehouse: Warehouse,
    fetching: BackgroundFetch,
    early_tables: Callable[[], Sequence[TableSpec]] | None,
    holding: ExitStack,
) -> EarlyFirstLoad | None:
    """The load's commit transaction, begun now on a connection `holding` keeps open, if the fetch still runs and
    `early_tables()` are all empty tables; None otherwise (then nothing is held). A stream with a cursor has had a
    load: the file is not even opened to look (an incremental run's answers step would open it for nothing)."""
    if early_tables is None or fetching.ended or fetching.cursor_before is not None:
        return None
    specs = early_tables()
    if not specs:
        return None
    with ExitStack() as attempt:
        try:
            early = EarlyFirstLoad.begin(attempt.enter_context(warehouse.one_connection()), fetching.load, specs)
        except WarehouseLockedError as error:  # another process has the file now: the commit waits for it later
            context.log.info(f"{fetching.stream}: not inserted while fetched ({error})")
            return None
        if early is None:
            return None
        early.start()
        holding.push(attempt.pop_all())
    context.log.info(
        f"{fetching.stream}: a first load; its parts go into {', '.join(s.name for s in specs)} "
        "while they are fetched (one transaction, committed at the end)"
    )
    return early


def _commit_fetched(
    context: AssetExecutionContext,
    warehouse: Warehouse,
    client: PlatformClient,
    stream: str,
    fetched: Fetched,
    early: EarlyFirstLoad | None,
    snapshot_tables: Iterable[str],
    before_commit: Callable[[Load, RunStats], None] | None,
    cursor_ceiling: Callable[[], datetime | None] | None,
    tables: Iterable[str],
) -> StreamLoad:
    if early is not None and early.error is not None:
        context.log.warning(
            f"{stream}: the rows inserted while fetching were rolled back ({early.error}); the "
            "commit inserts the whole load"
        )
    window, stats = fetched.window, fetched.stats
    with fetched.load as load:
        _report_new_fields(context, stream, stats)
        server_start = stats.server_time_at_start or load.started_at  # our clock when no Date header came
        cursor = next_cursor(
            window,
            fetched.cursor_before,
            server_run_start=server_start,
            newest_listed=stats.newest_last_date,
            safety_margin=client.settings.safety_margin,
            complete=stats.complete,
            ceiling=cursor_ceiling() if cursor_ceiling else UNBOUNDED,
        )
        if not stats.complete:
            context.log.warning(
                f"{stream}: page drift did not settle after {stats.passes} passes; the cursor "
                "stays where it was so the next run reads this window again"
            )
        complete = _snapshot_tables_to_close(context, stream, tuple(snapshot_tables), stats)
        if before_commit is not None:
            before_commit(load, stats)
        if sum(stats.rows.values()) >= RELEASE_AFTER_ROWS:
            load.flush()  # the part writers' last row groups go to disk before the commit
            _release_fetch_memory()  # the pages are in the lake now; DuckDB gets the memory for the commit
        committing = time.monotonic()
        # One open of the file for the commit and the row counts after it (~30-50 ms an open at scale large).
        with warehouse.one_connection() as conn:
            result = load.commit(cursor=cursor, complete_snapshots=complete, stats=stats.as_metadata(), early=early)
            done = time.monotonic()
            # cheap: DuckDB counts from its row groups
            row_counts = {table: row_count(conn, table) for table in sorted({*tables, *snapshot_tables})}
    if result.repeat_of is not None:
        context.log.info(
            f"{stream}: the same snapshot as load {result.repeat_of}; its rows were not compared "
            "again, only their last_loaded_at moved"
        )
    early_rows = early.rows_while_fetching if early is not None and early.open else {}
    return StreamLoad(result, stats, window, done - fetched.started, done - committing, row_counts, early_rows)


@contextmanager
def sync_client(context: AssetExecutionContext, settings: Settings, warehouse: Warehouse) -> Iterator[PlatformClient]:
    """The run's one client (one limit of LESSONSYNC_CONCURRENCY requests in flight for all its streams). The
    run's first sync step also starts fetching, in the background, every stream of the run whose window is
    already known (pipeline/prefetch/plan.py), so the network work of all streams overlaps and the steps,
    one after another, only commit."""
    # The page cache lives in the warehouse's data directory, which the platform resource's settings do not know
    # (a CLI --data-dir reaches the warehouse resource only).
    settings = settings.model_copy(update={"data_dir": warehouse.path.parent})
    with run_fetches(context.run.run_id, settings) as run:
        if run.should_prefetch():
            steps = context.get_step_execution_context().execution_plan.step_keys_to_execute
            started = start_prefetch(
                run,
                warehouse,
                steps,
                lambda cursor: window_for(context, cursor, settings, run_backfill_window(context)),
            )  # asked only if it has active lessons
            if started:
                context.log.info(
                    f"fetching {', '.join(started)} in the background, {settings.concurrency} "
                    "requests in flight at most across every stream of the run"
                )
        yield run.client


def run_backfill_window(context: AssetExecutionContext) -> Window | None:
    """The backfill range the run was launched with (its `backfill` resource config), None for a cursor run."""
    run_config: dict[str, Any] = dict(context.run.run_config)  # the Launchpad's YAML: nested mappings
    config = run_config.get("resources", {}).get("backfill", {}).get("config") or {}
    return BackfillWindow(**config).window()


def _report_progress(context: AssetExecutionContext, fetching: BackgroundFetch) -> None:
    seconds = max(time.monotonic() - fetching.started, 1e-9)
    context.log.info(
        f"{fetching.stream}: {fetching.pages:,} pages, {fetching.rows:,} rows, "
        f"{fetching.rows / seconds:,.0f} rows/s so far"
    )


def _snapshot_tables_to_close(
    context: AssetExecutionContext, stream: str, snapshot_tables: tuple[str, ...], stats: RunStats
) -> tuple[str, ...]:
    """The snapshot tables whose unseen rows may be marked deleted: none unless every record was seen and
    loaded. A quarantined record was seen but not loaded: its key must not count as vanished."""
    if not snapshot_tables or (stats.complete and not stats.quarantined):
        return snapshot_tables
    if stats.quarantined:
        context.log.warning(
            f"{stream}: {stats.quarantined} record(s) quarantined (lms.quarantine); no row of "
            f"{', '.join(snapshot_tables)} is marked deleted this run"
        )
    return ()


def _report_new_fields(context: AssetExecutionContext, stream: str, stats: RunStats) -> None:
    """Once per stream and run: the fields the platform sent that our models do not declare (kept in `extra`)."""
    if stats.new_fields:
        listed = ", ".join(f"{path} ({count:,} records)" for path, count in sorted(stats.new_fields.items()))
        context.log.warning(
            f"{stream}: the platform sent {len(stats.new_fields)} field(s) the models do not "
            f"declare, kept in the rows' extra column: {listed}"
        )


def _release_fetch_memory() -> None:
    """Hand memory the fetch freed back to the OS (Python's cyclic garbage, then Arrow's pool and glibc's
    arenas), so the process's peak is the fetch's or the commit's, not both added up."""
    gc.collect()
    release_free_memory()


def table_metadata(done: StreamLoad, table: str) -> Metadata:
    """Materialization metadata of one table of a stream load."""
    stats, result, window = done.stats, done.result, done.window
    counts = result.tables.get(table, TableLoadStats())  # a table with no rows in this load is untouched
    rows_fetched = stats.rows.get(table, 0)
    new_fields = paths_of(table, stats.new_fields)  # the platform's additions our models do not declare
    metadata: Metadata = {
        "window": window.describe(),
        "rows_fetched": rows_fetched,
        "rows_per_second": round(rows_fetched / done.seconds, 1) if done.seconds > 0 else None,
        "requests": stats.requests,
        "retries": stats.retries,
        "pages": stats.pages,
        "pages_from_cache": stats.pages_from_cache,  # snapshots: served as before, not decoded (page_cache.py)
        "quarantined": stats.quarantined,
        "new_fields": len(new_fields),
        "new_field_paths": MetadataValue.json(new_fields),
        "sweep_passes": stats.passes,
        "complete": stats.complete,
        "cursor_before": MetadataValue.text(str(result.cursor_before)),
        "cursor_after": MetadataValue.text(str(result.cursor_after)),
        "duration_s": round(done.seconds, 3),
        "commit_s": round(done.commit_seconds, 3),
    }
    metadata.update({f"rows_{name}": value for name, value in counts.as_dict().items()})
    if result.repeat_of is not None:  # the whole snapshot was the same as that load's (pipeline/warehouse/repeats.py)
        metadata["unchanged_since_load"] = result.repeat_of
    if table in done.row_counts:
        metadata["dagster/row_count"] = done.row_counts[table]
    if table in done.rows_while_fetching:
        metadata["rows_inserted_while_fetching"] = done.rows_while_fetching[table]
    return metadata
