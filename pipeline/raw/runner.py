"""The raw sync of one run, without Dagster: the selected streams fetched at once through one client (one limit of
LESSONSYNC_CONCURRENCY requests in flight for all of them), each load committed on this thread as soon as its
fetch ends, and a planned stream planned the moment its parent's listing ends (the answers from the active lessons:
pipeline/raw/answers.py). What to do with each stream follows from its declaration's kind (pipeline/contract/
streams.py), never from its name. `RawSync.run` yields one `StreamLoad` per committed stream, in commit order, for
the caller to report."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime

from pipeline.contract.evolution import DiscoveredColumn, SchemaPolicy
from pipeline.contract.streams import STREAM_TABLES, SYNC_STREAMS, SyncStream, planned_from
from pipeline.contract.tables import TABLES
from pipeline.memory import sync_process_memory
from pipeline.raw.commit import Log, StreamLoad, begin_early_insert, commit_fetched
from pipeline.raw.fetch import BackgroundFetch, Fetched
from pipeline.raw.mirror import MirrorWorker
from pipeline.raw.planners import Plan, planner_of, state_tables
from pipeline.raw.prefetch import Prefetch, take_prefetch
from pipeline.raw.progress import ProgressReporter
from pipeline.raw.windows import SNAPSHOT_WINDOW, UNBOUNDED, Window, cursor_window
from pipeline.settings import Settings, SyncSettings
from pipeline.source import BACKGROUND, URGENT, PlatformClient, PlatformUnreachableError, RunStats
from pipeline.warehouse import EARLY_PART_ROWS, EarlyFirstLoad, Load, Warehouse

PROGRESS_EVERY_S = 5.0


def schema_policy(settings: SyncSettings, discovered: tuple[DiscoveredColumn, ...]) -> SchemaPolicy:
    """Each raw table's schema contract (its stream's: LESSONSYNC_SCHEMA_CONTRACT[_BY_STREAM]) and its columns
    discovered so far, for the run's client (pipeline/source/evolution.py)."""
    streams = {table: stream for stream, tables in STREAM_TABLES.items() for table in tables}
    contracts = {table: settings.schema_contract_of(stream) for table, stream in streams.items()}
    return SchemaPolicy(contracts, discovered, streams)


def streams_of(tables: Iterable[str]) -> list[str]:
    """The streams that fill `tables`, in declaration order."""
    wanted = set(tables)
    return [stream for stream, filled in STREAM_TABLES.items() if wanted & set(filled)]


def commit_rank(stream: str) -> int:
    """Which ended fetch commits first: a stream others are planned from (the critical path), then a planned stream,
    then the rest."""
    if planned_from(stream):
        return 0
    return 1 if SYNC_STREAMS[stream].kind == "planned" else 2


def _label(stream: str) -> str:
    return stream.replace("_", " ")


@dataclass(frozen=True)
class RawRun:
    """What one run asks of the raw sync: its id (the loads', in the lake), and the incremental streams' window."""

    run_id: str
    full_refresh: bool = False
    backfill: Window | None = None  # a backfill's range; None reads from the cursors

    def incremental_window(self, cursor: datetime | None, settings: SyncSettings) -> Window:
        if self.backfill is not None:
            return self.backfill
        return cursor_window(cursor, settings.lookback, full_refresh=self.full_refresh)


class RawSync:
    """The streams of one run; `run()` iterates their commits. `drop(stream)` between two commits stops a stream
    that must not commit any more (a planned stream, when a blocking check of its parent failed)."""

    def __init__(self, warehouse: Warehouse, settings: Settings, log: Log, run: RawRun) -> None:
        # the page cache lives in the warehouse's data directory (a CLI --data-dir reaches the warehouse only)
        self.settings = settings.model_copy(update={"data_dir": warehouse.path.parent})
        self.warehouse, self.log, self.raw_run = warehouse, log, run
        self._pending: dict[str, BackgroundFetch] = {}
        self._dropped: set[str] = set()
        self._woken = threading.Event()
        self._plans: dict[str, Plan] = {}  # planned stream -> its plan, once planned
        self._decode_held = False
        self._wanted: set[str] = set()
        self._mirror: MirrorWorker | None = None  # the Iceberg mirror of what has committed (pipeline/raw/mirror.py)
        self._mirror_waits_for: set[str] = set()  # planned streams the mirror is held for (_hold_mirror_for_plans)
        self.schema = SchemaPolicy()  # each table's contract and discovered columns, read when the run starts
        self._progress = ProgressReporter(log)
        self._prefetch: Prefetch | None = None  # started with `lessonsync sync` (prefetch.py)
        self._adopted: dict[str, BackgroundFetch] = {}  # its fetches, until _start installs them
        self._client: PlatformClient | None = None  # the run's one client, opened by _start

    def run(self, streams: Iterable[str]) -> Generator[StreamLoad]:
        """Fetch `streams` together and yield each one's commit as it is made; the first failure is raised once every
        other stream has committed. A run stopped early (the caller closes the iterator, or an error) cancels what
        is still fetching and discards its lake parts."""
        wanted = [stream for stream in SYNC_STREAMS if stream in set(streams)]
        if not wanted:
            return
        for name in wanted:  # a planner that does not exist fails the run before anything is fetched
            if SYNC_STREAMS[name].planned is not None:
                planner_of(SYNC_STREAMS[name])
        self._wanted = set(wanted)
        with sync_process_memory():  # before the fetch threads start (pipeline/memory.py)
            self.schema = schema_policy(self.settings.sync, self.warehouse.discovered_columns())
            prefetch = self._prefetch = take_prefetch(
                self.raw_run, self.warehouse, self.settings, self.schema, wanted, self.log
            )
            catch_up = True
            try:
                client = self._start(wanted)
                yield from self._commits(client)
            except BaseException as error:
                # a failed stream: what committed is mirrored all the same; stopped, or the caller closed the run
                # early: nothing more is started
                catch_up = isinstance(error, Exception)
                raise
            finally:
                if prefetch is not None:  # not adopted: its fetches cancelled, their parts removed
                    prefetch.discard("the raw step ended before adopting them", self.log)
                self._pending.update(self._adopted)  # adopted, not yet started by _start: stopped with the rest
                self._adopted.clear()
                self._stop_pending()
                if self._client is not None:
                    self._client.close()
                self._end_mirror(catch_up)

    def mirror_paused(self) -> AbstractContextManager[None]:
        """The background mirror held while the block does DuckDB work of its own (pipeline/raw/mirror.py): a
        commit, or the checks of what committed, on any thread."""
        return self._mirror.paused() if self._mirror is not None else nullcontext()

    def _hold_mirror_for_plans(self, streams: list[SyncStream]) -> None:
        """The background mirror starts no table until each planned stream whose parent is in the run is planned
        small (then it runs beside that fetch) or has committed: a plan too large to overlap its parent's commit
        or to be inserted while fetched (`overlap_max_rows`) also keeps the mirror's work, and pyiceberg's memory,
        from adding up with that fetch and its commit; the mirror then runs after it."""
        if self._mirror is None:
            return
        self._mirror_waits_for = {s.name for s in streams if s.planned is not None and s.planned.parent in self._wanted}
        if self._mirror_waits_for:
            self._mirror.hold()

    def _mirror_need_not_wait_for(self, stream: str) -> None:
        """`stream` was planned small, committed, failed or dropped: the mirror no longer waits for it."""
        if self._mirror is None or stream not in self._mirror_waits_for:
            return
        self._mirror_waits_for.discard(stream)
        if not self._mirror_waits_for:
            self._mirror.release()

    def _end_mirror(self, catch_up: bool) -> None:
        """The background mirror told the run's commits are over. It goes on after the raw step (the mirror of the
        last stream's tables is not part of the step's time); the next step that opens the warehouse waits for it."""
        if self._mirror is None:
            return
        for stream in list(self._mirror_waits_for):
            self._mirror_need_not_wait_for(stream)
        if catch_up:
            self._mirror.finish()
        else:
            self._mirror.stop()

    def drop(self, stream: str, reason: str) -> None:
        """`stream` will not commit in this run: its fetch, if started, is cancelled and its parts discarded."""
        self._dropped.add(stream)
        self._mirror_need_not_wait_for(stream)
        fetch = self._pending.pop(stream, None)
        if fetch is not None:
            fetch.cancel()
            self._progress.ended(fetch, "stopped")
        self.log.warning(f"{stream}: not committed in this run: {reason}")

    def _start(self, wanted: list[str]) -> PlatformClient:
        """The incremental streams' fetches first, then the snapshots' (they take the slots the progress streams
        leave); a planned stream whose parent is not in the run is planned now, from the parent's committed records.
        The client they share is the prefetch's when its fetches are adopted, else a new one: a discarded prefetch's
        client has seen pages no load will commit (the columns they discovered, among others)."""
        wh = self.warehouse
        streams = [SYNC_STREAMS[name] for name in wanted]
        incremental = [s.name for s in streams if s.kind == "incremental"]
        with wh.one_connection() as conn:
            wh.ensure_tables([*TABLES.values(), *state_tables()])
            cursors = {name: wh.cursor(name) for name in incremental}
            windows = {
                name: (self.raw_run.incremental_window(cursors[name], self.settings.sync), cursors[name])
                for name in incremental
            }
            snapshots = [s.name for s in streams if s.kind == "snapshot"]
            windows |= {name: (SNAPSHOT_WINDOW, None) for name in snapshots}
            if self._prefetch is not None:  # on this connection, after the recovery: the loads committed since
                self._adopted = self._prefetch.adopt(wh, windows, self._woken.set, self.log)
            self._mirror = MirrorWorker.start(wh, conn)  # once the file is open: a lock is waited for only once
        adopted_client = self._prefetch.client if self._prefetch is not None and self._adopted else None
        client = self._client = adopted_client or PlatformClient(
            self.settings, page_cache=self.settings.page_cache_dir, schema=self.schema
        )
        client.open()
        self._hold_mirror_for_plans(streams)
        for name in incremental:
            self._fetch(client, name, *windows[name], URGENT)
        for name in snapshots:
            self._fetch(client, name, *windows[name], BACKGROUND)
        # One line for every stream started here (each line is an event in Dagster's run log)
        reading = "; ".join(f"{name}: reading {windows[name][0].describe()}" for name in self._pending)
        for stream in streams:
            if stream.planned is not None and stream.planned.parent not in self._wanted:
                self._plan(client, stream, loading=None, ceiling=wh.cursor(stream.planned.parent))
        self.log.info(
            f"fetching {', '.join(self._pending)} at once, {self.settings.concurrency} requests in flight at most "
            f"across every stream of the run: {reading}"
        )
        return client

    def _fetch(
        self, client: PlatformClient, stream: str, window: Window, cursor: datetime | None, priority: int
    ) -> None:
        adopted = self._adopted.pop(stream, None)  # the prefetch's fetch of this very window (Prefetch.adopt)
        if adopted is not None:
            self._pending[stream] = adopted
            return
        batches = client.iter_stream(stream, updated_since=window.since)
        self._pending[stream] = BackgroundFetch(
            self.warehouse, client, stream, self.raw_run.run_id, window, cursor, batches, priority,
            on_end=self._woken.set,
        )  # fmt: skip

    def _plan(
        self, client: PlatformClient, stream: SyncStream, *, loading: Load | None, ceiling: datetime | None
    ) -> None:
        """Plan `stream` (from its parent's committed records and, when given, the parent's uncommitted `loading`)
        and start its fetch. While other commits remain, its pages are decoded on the client's own thread: a decode
        worker process beside those commits would add up with them in memory."""
        assert stream.planned is not None
        wh = self.warehouse
        cursor = wh.cursor(stream.name)
        window = self.raw_run.incremental_window(cursor, self.settings.sync)
        plan = planner_of(stream).plan(wh, window, self.settings.sync, loading=loading, ceiling=ceiling)
        self._plans[stream.name] = plan
        if plan.parent_rows <= stream.planned.overlap_max_rows:  # small enough to mirror beside its fetch
            self._mirror_need_not_wait_for(stream.name)
        batches, planned = plan.fetch(client)
        others = any(name != stream.name for name in self._pending) or loading is not None
        if others:
            client.hold_decode_workers()
            self._decode_held = True
        parent = _label(stream.planned.parent)
        self.log.info(
            f"{stream.name}: reading {window.describe()}; {planned}, "
            + (f"fetching while the {parent} commit" if loading is not None else "fetching from now")
        )
        self._pending[stream.name] = BackgroundFetch(
            wh, client, stream.name, self.raw_run.run_id, window, cursor, batches, URGENT, plan=plan,
            part_rows=EARLY_PART_ROWS if stream.early_insert else None, on_end=self._woken.set,
        )  # fmt: skip

    def _commits(self, client: PlatformClient) -> Iterator[StreamLoad]:
        failures: list[BaseException] = []
        while self._pending:
            name = self._next_ended()
            stream = SYNC_STREAMS[name]
            fetch = self._pending.pop(name)
            try:
                with ExitStack() as holding:
                    early = None
                    if stream.kind == "planned" and self._decode_held:  # nothing else commits beside it any more
                        client.hold_decode_workers(False)
                        self._decode_held = False
                    if stream.early_insert and not fetch.ended:  # nothing else commits until it has
                        specs = tuple(self.schema.spec(table) for table in stream.table_names)
                        inserts = self._inserted_while_fetched(stream)
                        early = begin_early_insert(self.log, self.warehouse, fetch, specs, holding, inserts=inserts)
                    try:
                        fetched = fetch.wait(self._report_progress, PROGRESS_EVERY_S)
                    finally:
                        if early is not None:
                            early.stop()  # the commit finishes the inserts, on this thread
                    with self.mirror_paused():
                        done = self._commit(client, stream, fetched, early)
            except Exception as error:  # the other streams still commit; the run fails at the end
                self.log.warning(f"{name}: failed ({type(error).__name__}: {error}); no row of it committed")
                self._progress.ended(fetch, "failed")
                failures.append(error)
                if isinstance(error, PlatformUnreachableError):
                    self._stop_fetches_waiting_on(error)
                for child in planned_from(name):
                    if child.name in self._wanted and child.name not in self._dropped:
                        self.drop(child.name, f"the {_label(name)} they are planned from did not commit")
                continue
            finally:
                plan = self._plans.get(name)
                if plan is not None:
                    plan.close()
                self._mirror_need_not_wait_for(name)  # committed or failed
            self._progress.ended(fetch, "committed")
            with self.mirror_paused():  # the caller reports the commit meanwhile
                yield done
            if self._mirror is not None:
                self._mirror.committed(stream.table_names)
        if failures:
            raise failures[0]

    def _next_ended(self) -> str:
        """The stream to commit next: one whose fetch has ended (by commit_rank: a parent first, the critical path);
        else a planned stream, the longest fetch, waited for with its decode workers on and its first load inserted
        while fetched, the snapshots still fetching meanwhile and committed after it; else, when a single fetch
        remains, that one. While none is ready, progress every PROGRESS_EVERY_S."""
        while True:
            self._woken.clear()
            ended = [stream for stream, fetch in self._pending.items() if fetch.ended]
            if ended:
                return min(ended, key=lambda s: (commit_rank(s), s))
            planned = [stream for stream in self._pending if SYNC_STREAMS[stream].kind == "planned"]
            if planned:
                return planned[0]
            if len(self._pending) == 1:
                return next(iter(self._pending))
            if not self._woken.wait(PROGRESS_EVERY_S):
                for fetch in self._pending.values():
                    self._report_progress(fetch)

    def _inserted_while_fetched(self, stream: SyncStream) -> bool:
        """Whether a planned stream's first load is inserted part by part while fetched: not when its plan is too
        large to add that DuckDB work beside the fetch (then only the Iceberg mirror's files are written meanwhile,
        as files, one part at a time, within DuckDB's reduced memory limit)."""
        plan = self._plans.get(stream.name)
        return stream.planned is not None and plan is not None and plan.parent_rows <= stream.planned.overlap_max_rows

    def _commit(
        self, client: PlatformClient, stream: SyncStream, fetched: Fetched, early: EarlyFirstLoad | None
    ) -> StreamLoad:
        wh, settings, log = self.warehouse, self.settings.sync, self.log
        tables = stream.table_names
        if stream.kind == "snapshot":
            return commit_fetched(log, wh, settings, fetched, snapshot_tables=tables)
        if stream.kind == "incremental":
            return self._commit_parent(client, stream, fetched)
        plan = self._plans.get(stream.name)
        assert plan is not None, "a planned stream is committed only after it was planned"
        done = commit_fetched(
            log, wh, settings, fetched, early=early, tables=tables, before_commit=plan.before_commit,
            ceiling=plan.ceiling,
        )  # fmt: skip
        said, extra = plan.committed(done)
        log.info(said)
        return replace(done, extra=extra)

    def _commit_parent(self, client: PlatformClient, stream: SyncStream, fetched: Fetched) -> StreamLoad:
        """An incremental stream's commit. The planned streams of the run planned from it are planned from its
        uncommitted load before the commit (their fetch runs while it commits), or, above their overlap_max_rows,
        from the committed table after it; either way capped by the cursor this commit sets."""
        ahead = [
            child
            for child in planned_from(stream.name)
            if child.name in self._wanted and child.name not in self._dropped and child.name not in self._plans
        ]
        overlapped: list[str] = []

        def plan_from_load(load: Load, stats: RunStats) -> None:
            for child in ahead:
                assert child.planned is not None
                if fetched.stats.rows.get(stream.table, 0) <= child.planned.overlap_max_rows:
                    self._plan(client, child, loading=load, ceiling=UNBOUNDED)
                    overlapped.append(child.name)

        done = commit_fetched(
            self.log, self.warehouse, self.settings.sync, fetched, tables=stream.table_names,
            before_commit=plan_from_load if ahead else None,
        )  # fmt: skip
        for child in ahead:
            if child.name in overlapped:  # the cursor of exactly the records it planned from
                self._plans[child.name].ceiling = done.result.cursor_after
            else:  # too large to overlap the commit: planned from the committed table now
                self._plan(client, child, loading=None, ceiling=done.result.cursor_after)
        return done

    def _report_progress(self, fetch: BackgroundFetch) -> None:
        self._progress.report(fetch)  # a line when its pages moved; else, once, what it waits for

    def _stop_fetches_waiting_on(self, failure: PlatformUnreachableError) -> None:
        """A request every stream waits on (the token) failed for good: no fetch still running can end well, so each
        is stopped now, said in one line; a fetch that already ended whole still commits."""
        stopped = [stream for stream, fetch in self._pending.items() if not fetch.fetched_whole]
        for stream in stopped:
            fetch = self._pending.pop(stream)
            fetch.cancel()
            self._progress.ended(fetch, "stopped")
        if stopped:
            self.log.warning(
                f"{', '.join(stopped)}: stopped, nothing of them committed: every stream waits on "
                f"{failure.method} {failure.endpoint}, which failed"
            )

    def _stop_pending(self) -> None:
        """A run stopped before its commits: what still fetches is cancelled, its lake parts discarded."""
        stopped = list(self._pending)
        for fetch in self._pending.values():
            fetch.cancel()
        self._pending.clear()
        for plan in self._plans.values():
            plan.close()
        if stopped:
            self.log.warning(f"stopped the fetch of {', '.join(stopped)}: the run ended before they were committed")
