"""The checks of each committed stream, evaluated on a thread of their own while the raw step commits the next stream.

A stream's key and link checks scan what its commit wrote (a second or more for the answers at scale large); run on
the step's thread, they held the next commit back although nothing in them writes. Here one thread evaluates them,
stream after stream in commit order, on a DuckDB connection of its own opened before the first fetch (the same
database instance as the commits: a connection opened later could meet the instance with settings a first load's
early insert changed). Each stream's checks read one consistent snapshot (one read transaction), the warehouse as it
was once its commit was made, or later: a commit that ran meanwhile only adds what the run loaded anyway. The
background Iceberg mirror is held while they run, as during a commit.

The step waits for a stream's checks before the next commit when other streams of the run are planned from it: its
blocking check decides whether they may commit at all. Results reach Dagster on the step's thread, in commit order."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass

import duckdb
from dagster import AssetCheckResult

from pipeline.defs.raw.checks import CheckRules, raw_check_results
from pipeline.warehouse import Warehouse, catalog_unchanged, reached

Loaded = dict[str, dict[str, object]]  # table -> what its contract check reads (pipeline/defs/raw/metadata.py)


@dataclass(frozen=True)
class StreamChecks:
    """The check results of one committed stream's `tables` (a table whose checks were skipped has none)."""

    tables: tuple[str, ...]
    results: list[AssetCheckResult]


class ChecksBeside:
    """`submit` a committed stream's tables; `ready()` yields the results of those already evaluated, `rest()`
    waits for every one. Closed with the step (an evaluation in progress ends first; none queued starts)."""

    def __init__(
        self,
        warehouse: Warehouse,
        selected: dict[str, set[str]],
        rules: CheckRules,
        run_id: str,
        held: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._selected, self._rules, self._run_id, self._held = selected, rules, run_id, held
        self._stack = ExitStack()
        self._conn: duckdb.DuckDBPyConnection = self._stack.enter_context(warehouse.private_connection())
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lessonsync-checks")
        self._pending: deque[Future[StreamChecks]] = deque()

    def submit(self, stream: str, tables: tuple[str, ...], loaded: Loaded) -> Future[StreamChecks] | None:
        """Queue the checks of `stream`'s `tables`; None when none of them is selected."""
        if not any(table in self._selected for table in tables):
            return None
        future = self._thread.submit(self._evaluate, stream, tables, loaded)
        self._pending.append(future)
        return future

    def ready(self) -> Iterator[StreamChecks]:
        """The results evaluated so far, in commit order (an evaluation that failed raises here)."""
        while self._pending and self._pending[0].done():
            yield self._pending.popleft().result()

    def rest(self) -> Iterator[StreamChecks]:
        """Every result still to come, waited for in commit order."""
        while self._pending:
            yield self._pending.popleft().result()

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)
        self._stack.close()

    def _evaluate(self, stream: str, tables: tuple[str, ...], loaded: Loaded) -> StreamChecks:
        reached(f"raw_checks:{stream}")
        conn = self._conn
        with self._held():
            conn.begin()  # one snapshot for every statement of the stream's checks
            try:
                with catalog_unchanged(conn):
                    results = raw_check_results(conn, tables, self._selected, self._rules, self._run_id, loaded)
                    return StreamChecks(tables, list(results))
            finally:
                conn.rollback()
