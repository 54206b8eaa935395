"""The raw sync of one run, without Dagster: the selected streams fetched at once through one client (one limit of
LESSONSYNC_CONCURRENCY requests in flight for all of them), each load committed on this thread as soon as its
fetch ends, and the answers planned the moment the active-lessons listing ends (pipeline/raw/answers.py).
`RawSync.run` yields one `StreamLoad` per committed stream, in commit order, for the caller to report."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import datetime

from pipeline.contract.streams import SNAPSHOT_STREAMS
from pipeline.contract.tables import TABLES, TableSpec
from pipeline.memory import sync_process_memory
from pipeline.raw.answer_versions import VERSIONS
from pipeline.raw.answers import AnswersPlan, plan_answers
from pipeline.raw.commit import Log, StreamLoad, begin_early_insert, commit_fetched
from pipeline.raw.fetch import BackgroundFetch, Fetched
from pipeline.raw.prefetch import Prefetch, take_prefetch
from pipeline.raw.windows import SNAPSHOT_WINDOW, UNBOUNDED, Window, cursor_window
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.errors import PlatformUnreachableError
from pipeline.source.slots import BACKGROUND, URGENT
from pipeline.source.stats import RunStats
from pipeline.warehouse import EARLY_PART_ROWS, EarlyFirstLoad, Load, Warehouse

# Every raw table, by the stream that fills it; a stream runs when any of its tables is asked for.
STREAM_TABLES: dict[str, tuple[str, ...]] = {
    "active_lessons": ("active_lessons",),
    "answers": ("answers", "answer_results"),
    "categories": ("categories",),
    "groups": ("groups", "users", "group_members"),
    "lesson_sessions": ("lesson_sessions", "lesson_session_registrations"),
    "lessons": ("lessons", "lesson_questions"),
}
PROGRESS_EVERY_S = 5.0
# A larger active-lessons load commits before the answers start fetching: that commit sorts and stages millions of
# rows within DuckDB's memory limit, and the answers' fetch buffers and decode worker would add up with it.
OVERLAP_MAX_ROWS = 500_000


def streams_of(tables: Iterable[str]) -> list[str]:
    """The streams that fill `tables`, in STREAM_TABLES order."""
    wanted = set(tables)
    return [stream for stream, filled in STREAM_TABLES.items() if wanted & set(filled)]


@dataclass(frozen=True)
class RawRun:
    """What one run asks of the raw sync: its id (the loads', in the lake), and the incremental streams' window."""

    run_id: str
    full_refresh: bool = False
    backfill: Window | None = None  # a backfill's range; None reads from the cursors

    def incremental_window(self, cursor: datetime | None, settings: Settings) -> Window:
        if self.backfill is not None:
            return self.backfill
        return cursor_window(cursor, settings.lookback, full_refresh=self.full_refresh)


class RawSync:
    """The streams of one run; `run()` iterates their commits. `drop(stream)` between two commits stops a stream
    that must not commit any more (the answers, when a blocking check of the active lessons failed)."""

    def __init__(self, warehouse: Warehouse, settings: Settings, log: Log, run: RawRun) -> None:
        # the page cache lives in the warehouse's data directory (a CLI --data-dir reaches the warehouse only)
        self.settings = settings.model_copy(update={"data_dir": warehouse.path.parent})
        self.warehouse, self.log, self.raw_run = warehouse, log, run
        self._pending: dict[str, BackgroundFetch] = {}
        self._dropped: set[str] = set()
        self._woken = threading.Event()
        self._answers: AnswersPlan | None = None
        self._decode_held = False
        self._wants_answers = False
        self._prefetch: Prefetch | None = None  # started with `lessonsync sync` (prefetch.py)
        self._adopted: dict[str, BackgroundFetch] = {}  # its fetches, until _start installs them

    def run(self, streams: Iterable[str]) -> Iterator[StreamLoad]:
        """Fetch `streams` together and yield each one's commit as it is made; the first failure is raised once every
        other stream has committed. A run stopped early (the caller closes the iterator, or an error) cancels what
        is still fetching and discards its lake parts."""
        wanted = [stream for stream in STREAM_TABLES if stream in set(streams)]
        if not wanted:
            return
        self._wants_answers = "answers" in wanted
        with sync_process_memory():  # before the fetch threads start (pipeline/memory.py)
            prefetch = self._prefetch = take_prefetch(self.raw_run, self.warehouse, self.settings, wanted, self.log)
            client = (
                prefetch.client
                if prefetch and prefetch.client
                else PlatformClient(self.settings, page_cache=self.settings.page_cache_dir)
            )
            client.open()
            try:
                self._start(client, wanted)
                yield from self._commits(client)
            finally:
                if prefetch is not None:  # not adopted: its fetches cancelled, their parts removed
                    prefetch.discard("the raw step ended before adopting them", self.log)
                self._stop_pending()
                client.close()

    def drop(self, stream: str, reason: str) -> None:
        """`stream` will not commit in this run: its fetch, if started, is cancelled and its parts discarded."""
        self._dropped.add(stream)
        fetch = self._pending.pop(stream, None)
        if fetch is not None:
            fetch.cancel()
        self.log.warning(f"{stream}: not committed in this run: {reason}")

    def _start(self, client: PlatformClient, wanted: list[str]) -> None:
        wh = self.warehouse
        with wh.one_connection():
            wh.ensure_tables([*TABLES.values(), VERSIONS])
            cursor = wh.cursor("active_lessons") if "active_lessons" in wanted else None
            if self._prefetch is not None:  # on this connection, after the recovery: the loads committed since
                self._adopted = self._prefetch.adopt(wh, self._woken.set, self.log)
        if "active_lessons" in wanted:
            window = self.raw_run.incremental_window(cursor, self.settings)
            self._fetch(client, "active_lessons", window, cursor, URGENT)
        for stream in wanted:
            if stream in SNAPSHOT_STREAMS:  # they take the slots the progress streams leave
                self._fetch(client, stream, SNAPSHOT_WINDOW, None, BACKGROUND)
        if "answers" in wanted and "active_lessons" not in wanted:
            self._plan_answers(client, loading=None, ceiling=wh.cursor("active_lessons"))
        self.log.info(
            f"fetching {', '.join(self._pending)} at once, {self.settings.concurrency} requests in flight at most "
            "across every stream of the run"
        )

    def _fetch(
        self, client: PlatformClient, stream: str, window: Window, cursor: datetime | None, priority: int
    ) -> None:
        self.log.info(f"{stream}: reading {window.describe()}")
        adopted = self._adopted.pop(stream, None)
        if adopted is not None and (adopted.window, adopted.cursor_before) == (window, cursor):
            self._pending[stream] = adopted
            return
        if adopted is not None:  # planned from the same cursor, so never; kept exact all the same
            adopted.cancel()
        batches = client.iter_stream(stream, updated_since=window.since)
        self._pending[stream] = BackgroundFetch(
            self.warehouse, client, stream, self.raw_run.run_id, window, cursor, batches, priority,
            on_end=self._woken.set,
        )  # fmt: skip

    def _plan_answers(self, client: PlatformClient, *, loading: Load | None, ceiling: datetime | None) -> None:
        """Plan the answers (from the committed active lessons and, when given, the sweep's uncommitted `loading`)
        and start their fetch. While other commits remain, their pages are decoded on the client's own thread: a
        decode worker process beside those commits would add up with them in memory."""
        wh = self.warehouse
        cursor = wh.cursor("answers")
        window = self.raw_run.incremental_window(cursor, self.settings)
        plan = self._answers = plan_answers(wh, window, self.settings, loading=loading, ceiling=ceiling)
        planner_input = plan.lessons.planner_input()
        others = any(stream != "answers" for stream in self._pending) or loading is not None
        if others:
            client.hold_decode_workers()
            self._decode_held = True
        self.log.info(
            f"answers: reading {window.describe()}; planned from the {planner_input.num_rows:,} active lessons "
            "of their window, "
            + ("fetching while the active lessons commit" if loading is not None else "fetching from now")
        )
        self._pending["answers"] = BackgroundFetch(
            wh, client, "answers", self.raw_run.run_id, window, cursor,
            client.iter_answers(planner_input, updated_since=window.since),
            URGENT, plan=plan, part_rows=EARLY_PART_ROWS, on_end=self._woken.set,
        )  # fmt: skip

    def _commits(self, client: PlatformClient) -> Iterator[StreamLoad]:
        failures: list[BaseException] = []
        while self._pending:
            stream = self._next_ended()
            fetch = self._pending.pop(stream)
            try:
                with ExitStack() as holding:
                    early = None
                    if stream == "answers" and self._decode_held:  # nothing else commits beside them any more
                        client.hold_decode_workers(False)
                        self._decode_held = False
                    if stream == "answers" and not fetch.ended:  # nothing else commits until they have
                        early = begin_early_insert(self.log, self.warehouse, fetch, self._early_tables(), holding)
                    try:
                        fetched = fetch.wait(self._report_progress, PROGRESS_EVERY_S)
                    finally:
                        if early is not None:
                            early.stop()  # the commit finishes the inserts, on this thread
                    done = self._commit(client, stream, fetched, early)
            except Exception as error:  # the other streams still commit; the run fails at the end
                self.log.warning(f"{stream}: failed ({type(error).__name__}: {error}); no row of it committed")
                failures.append(error)
                if isinstance(error, PlatformUnreachableError):
                    self._stop_fetches_waiting_on(error)
                if stream == "active_lessons" and self._wants_answers and "answers" not in self._dropped:
                    self.drop("answers", "the active lessons they are planned from did not commit")
                continue
            finally:
                if stream == "answers" and self._answers is not None:
                    self._answers.close()
            yield done
        if failures:
            raise failures[0]

    def _next_ended(self) -> str:
        """The stream to commit next: one whose fetch has ended (the active lessons first, the critical path); else
        the answers, the longest fetch, waited for with their decode workers on and their first load inserted while
        fetched, the snapshots still fetching meanwhile and committed after them; else, when a single fetch remains,
        that one. While none is ready, progress every PROGRESS_EVERY_S."""
        while True:
            self._woken.clear()
            ended = [stream for stream, fetch in self._pending.items() if fetch.ended]
            if ended:
                return min(ended, key=lambda s: (s != "active_lessons", s != "answers", s))
            if "answers" in self._pending:
                return "answers"
            if len(self._pending) == 1:
                return next(iter(self._pending))
            if not self._woken.wait(PROGRESS_EVERY_S):
                for fetch in self._pending.values():
                    self._report_progress(fetch)

    def _early_tables(self) -> tuple[TableSpec, ...]:
        """The answers' tables, inserted part by part while fetched when this is their first load, unless the
        window is too large to add that DuckDB work beside the fetch."""
        plan = self._answers
        if plan is None or plan.counts[0] > OVERLAP_MAX_ROWS:
            return ()
        return (TABLES["answers"], TABLES["answer_results"])

    def _commit(
        self, client: PlatformClient, stream: str, fetched: Fetched, early: EarlyFirstLoad | None
    ) -> StreamLoad:
        wh, settings, log = self.warehouse, self.settings, self.log
        tables = STREAM_TABLES[stream]
        if stream in SNAPSHOT_STREAMS:
            return commit_fetched(log, wh, settings, fetched, snapshot_tables=tables)
        if stream == "active_lessons":
            plan_ahead = "answers" not in self._dropped and self._answers is None and self._wants_answers
            loading: list[Load] = []

            def plan_from_load(load: Load, stats: RunStats) -> None:
                if fetched.stats.rows.get("active_lessons", 0) <= OVERLAP_MAX_ROWS:
                    self._plan_answers(client, loading=load, ceiling=UNBOUNDED)
                    loading.append(load)

            done = commit_fetched(
                log, wh, settings, fetched, tables=tables, before_commit=plan_from_load if plan_ahead else None
            )
            if plan_ahead and not loading:  # too large to overlap its commit: planned from the committed table now
                self._plan_answers(client, loading=None, ceiling=done.result.cursor_after)
            elif self._answers is not None and loading:
                self._answers.ceiling = done.result.cursor_after  # the cursor of exactly the lessons it planned from
            return done
        plan = self._answers
        assert plan is not None, "the answers are committed only after they were planned"
        in_window, refetched = plan.counts

        def record_versions(load: Load, stats: RunStats) -> None:
            # Only a complete run holds the answers of every planned active lesson: an incomplete one records
            # nothing, so the next run asks for them again.
            if stats.complete:
                for versions in plan.lessons.fetched_versions():
                    load.write(VERSIONS, versions)

        done = commit_fetched(
            log, wh, settings, fetched, early=early, tables=tables, before_commit=record_versions, ceiling=plan.ceiling
        )
        log.info(
            f"answers: {refetched:,} of the window's {in_window:,} active lessons needed their answers; "
            f"{done.stats.planned_requests:,} requests planned"
        )
        return replace(
            done,
            extra={
                "planned_requests": done.stats.planned_requests,
                "window_active_lessons": in_window,
                "refetched_active_lessons": refetched,
            },
        )

    def _report_progress(self, fetch: BackgroundFetch) -> None:
        seconds = max(time.monotonic() - fetch.started, 1e-9)
        self.log.info(
            f"{fetch.stream}: {fetch.pages:,} pages, {fetch.rows:,} rows, {fetch.rows / seconds:,.0f} rows/s so far"
        )

    def _stop_fetches_waiting_on(self, failure: PlatformUnreachableError) -> None:
        """A request every stream waits on (the token) failed for good: no fetch still running can end well, so each
        is stopped now, said in one line; a fetch that already ended whole still commits."""
        stopped = [stream for stream, fetch in self._pending.items() if not fetch.fetched_whole]
        for stream in stopped:
            self._pending.pop(stream).cancel()
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
        if self._answers is not None:
            self._answers.close()
        if stopped:
            self.log.warning(f"stopped the fetch of {', '.join(stopped)}: the run ended before they were committed")
