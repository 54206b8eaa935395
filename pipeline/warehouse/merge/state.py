"""Sync state kept inside the warehouse, so it commits in the same transaction as the rows it covers:
lms._sync_state (one cursor per stream, never moving backwards), lms._load_runs (one row per load), with the
view lms._snapshot_seen over the latter (what each complete snapshot saw: merge/seen.py), and
lms._discovered_columns (the columns loads added for fields the platform began sending)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

from pipeline.contract.evolution import DiscoveredColumn
from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.schema import REGISTRY_DDL, REGISTRY_KEY_COLUMN
from pipeline.warehouse.duck.tabledef import SCHEMA, TableDef, changed_tables
from pipeline.warehouse.lake.manifest import LoadOutcome, LoadPlan

SYNC_STATE = f"{SCHEMA}._sync_state"
LOAD_RUNS = f"{SCHEMA}._load_runs"
SNAPSHOT_SEEN = f"{SCHEMA}._snapshot_seen"
DISCOVERED = f"{SCHEMA}._discovered_columns"

_DDL = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}",
    f"""CREATE TABLE IF NOT EXISTS {SYNC_STATE} (
        stream VARCHAR PRIMARY KEY,
        cursor TIMESTAMPTZ,            -- the next window of this stream starts here (minus the lookback)
        last_load_seq BIGINT NOT NULL,
        last_loaded_at TIMESTAMPTZ NOT NULL)""",
    # a stream read from an ordered log (the certificate inbox) keeps its position there instead of a time;
    # added, not declared above, so that files from before it get the column at the same place
    f"ALTER TABLE {SYNC_STATE} ADD COLUMN IF NOT EXISTS position BIGINT",
    f"""CREATE TABLE IF NOT EXISTS {LOAD_RUNS} (
        load_seq BIGINT PRIMARY KEY,   -- commit order; the lake manifest _loads/<load_seq>-<load_id>.json
        load_id VARCHAR NOT NULL,
        stream VARCHAR NOT NULL,
        run_id VARCHAR NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        committed_at TIMESTAMPTZ NOT NULL,  -- the load time of every row this load wrote
        cursor_requested TIMESTAMPTZ,
        cursor_before TIMESTAMPTZ,
        cursor_after TIMESTAMPTZ,
        complete_snapshots VARCHAR[] NOT NULL,
        tables JSON NOT NULL,          -- per table: fetched, inserted, updated, unchanged, deleted, stale; and
                                       -- for snapshot tables `content`, the digest of its rows (repeats.py)
        stats JSON NOT NULL)           -- what the caller reported (requests, retries...)""",
    # columns no declaration has, added for fields the platform began sending (contract/evolution.py); written by
    # the load that added each, from its manifest, so a replay or a rebuild writes them again
    f"""CREATE TABLE IF NOT EXISTS {DISCOVERED} (
        table_name VARCHAR NOT NULL,
        column_name VARCHAR NOT NULL,
        api_path VARCHAR NOT NULL,
        type VARCHAR NOT NULL,
        first_seen_load BIGINT NOT NULL,
        first_seen_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (table_name, column_name))""",
)
LOADS_PER_READ = 64  # newest loads first, a batch at a time: each run's loads name every table it wrote
# In a repeat's counts of a table (record_load): how many keys its rows hold, none of them with two different rows.
VERIFIED_KEYS = "keys"
# A view, not a table: derived from the load records alone, it holds after a replay, a roll-forward or a rebuild
# without anything else to keep in step.
_SNAPSHOT_SEEN_SQL = (
    f"SELECT unnest(complete_snapshots) AS table_name, load_seq, committed_at AS seen_at FROM {LOAD_RUNS}"
)
SNAPSHOT_SEEN_COMMENTS = (
    "One row per complete snapshot of a table: the load saw, at seen_at, every row of the table it did not mark "
    "deleted (it wrote only the rows it changed: their last_loaded_at)",
    {
        "table_name": "a table the load pulled whole",
        "load_seq": "the load (lms._load_runs)",
        "seen_at": "when the load committed: every row of the table live after it was seen then",
    },
)


def ensure_state_tables(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the internal tables (sync state, load runs, table registry) and views if missing. Every write path
    calls this first, so later queries may assume them: inside a transaction a failed query would abort it."""
    for statement in (*_DDL, REGISTRY_DDL, REGISTRY_KEY_COLUMN):
        conn.execute(statement)
    _ensure_snapshot_seen(conn)


def _ensure_snapshot_seen(conn: duckdb.DuckDBPyConnection) -> None:
    exists = conn.execute(
        "SELECT count(*) FROM duckdb_views() WHERE database_name = current_database() AND schema_name = ? "
        "AND view_name = ?",
        [SCHEMA, SNAPSHOT_SEEN.split(".")[1]],
    ).fetchall()[0][0]
    if exists:
        return
    about, columns = SNAPSHOT_SEEN_COMMENTS
    conn.execute(f"CREATE VIEW {SNAPSHOT_SEEN} AS {_SNAPSHOT_SEEN_SQL}")
    conn.execute(f"COMMENT ON VIEW {SNAPSHOT_SEEN} IS '{about}'")
    for column, text in columns.items():
        conn.execute(f"COMMENT ON COLUMN {SNAPSHOT_SEEN}.{column} IS '{text}'")


def read_cursor(conn: duckdb.DuckDBPyConnection, stream: str) -> datetime | None:
    # fetchall: the result is finished, so the connection can serve the next query (DuckDB 2.0 refuses
    # conn.sql() while an execute() result is still open)
    rows = conn.execute(f"SELECT cursor FROM {SYNC_STATE} WHERE stream = ?", [stream]).fetchall()
    return utc(rows[0][0]) if rows and rows[0][0] is not None else None


def read_last_loads(conn: duckdb.DuckDBPyConnection, streams: Iterable[str]) -> dict[str, tuple[datetime | None, int]]:
    """Each of `streams` that has committed a load: its cursor and the sequence number of its last load."""
    wanted = sorted(set(streams))
    rows = conn.execute(
        f"SELECT stream, cursor, last_load_seq FROM {SYNC_STATE} WHERE list_contains(?, stream)", [wanted]
    ).fetchall()
    return {stream: (utc(cursor) if cursor is not None else None, int(seq)) for stream, cursor, seq in rows}


def advance_cursor(conn: duckdb.DuckDBPyConnection, plan: LoadPlan) -> tuple[datetime | None, datetime | None]:
    """Store max(stored cursor, requested cursor) for the plan's stream; return (before, after). A cursor reset
    (`lessonsync reset`, checked there never to move forward) stores the requested cursor as it is."""
    before = read_cursor(conn, plan.stream)
    candidates = [c for c in (before, plan.cursor) if c is not None]
    after = max(candidates) if candidates else None
    if plan.cursor_reset:
        after = plan.cursor
    conn.execute(
        f"INSERT INTO {SYNC_STATE} (stream, cursor, last_load_seq, last_loaded_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (stream) DO UPDATE SET cursor = excluded.cursor, last_load_seq = excluded.last_load_seq, "
        "last_loaded_at = excluded.last_loaded_at",
        [plan.stream, after, plan.seq, plan.loaded_at],
    )
    return before, after


def read_position(conn: duckdb.DuckDBPyConnection, stream: str) -> int | None:
    rows = conn.execute(f"SELECT position FROM {SYNC_STATE} WHERE stream = ?", [stream]).fetchall()
    return int(rows[0][0]) if rows and rows[0][0] is not None else None


def advance_position(conn: duckdb.DuckDBPyConnection, plan: LoadPlan) -> tuple[int | None, int | None]:
    """After advance_cursor (the stream's row exists): store max(stored, requested position); (before, after).
    Like the cursor it only moves forward, so a retried or concurrent load never rewinds it."""
    before = read_position(conn, plan.stream)
    after = max((p for p in (before, plan.position) if p is not None), default=None)
    if after != before:
        conn.execute(f"UPDATE {SYNC_STATE} SET position = ? WHERE stream = ?", [after, plan.stream])
    return before, after


def record_load(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, outcome: LoadOutcome) -> None:
    contents = {table.name: table.content for table in plan.tables if table.content}
    # The digest goes with the table's counts, not in a column of its own: a file this version wrote stays
    # writable by the one before it (its INSERT names no columns), so a rolled-back deployment keeps running.
    # A repeat found its rows hold as many keys as the table has live rows (its `unchanged`), none with two
    # different rows: recorded, the next repeat of the same rows does not read its parts to find it again.
    tables = {
        name: {
            **stats.as_dict(),
            **({"content": contents[name]} if name in contents else {}),
            **({VERIFIED_KEYS: stats.unchanged} if outcome.repeat_of is not None else {}),
        }
        for name, stats in outcome.tables.items()
    }
    conn.execute(
        f"INSERT INTO {LOAD_RUNS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            plan.seq,
            plan.load_id,
            plan.stream,
            plan.run_id,
            plan.started_at,
            plan.loaded_at,
            plan.cursor,
            outcome.cursor_before,
            outcome.cursor_after,
            list(plan.complete_snapshots),
            json.dumps(tables),
            json.dumps(dict(plan.stats)),
        ],
    )


def record_discovered(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, catalog: Mapping[str, TableDef]) -> None:
    """The columns `plan` discovered, in lms._discovered_columns and described on their table (COMMENT ON COLUMN):
    each the first time a load adds it, and only if its table has it (a load whose rows with it were all set aside
    wrote no batch of the new shape)."""
    known = {
        (table, column)
        for table, column in conn.execute(f"SELECT table_name, column_name FROM {DISCOVERED}").fetchall()
    }
    for found in plan.discovered:
        table = catalog.get(found.table)
        if (found.table, found.column) in known or table is None or found.column not in table.column_names:
            continue
        column = found.committed(plan.seq, plan.loaded_at)
        conn.execute(
            f"INSERT INTO {DISCOVERED} VALUES (?, ?, ?, ?, ?, ?)",
            [column.table, column.column, column.api_path, column.type, plan.seq, plan.loaded_at],
        )
        text = column.description.replace("'", "''")
        conn.execute(f"COMMENT ON COLUMN {SCHEMA}.{q(column.table)}.{q(column.column)} IS '{text}'")
        known.add((found.table, found.column))


def read_discovered(conn: duckdb.DuckDBPyConnection) -> tuple[DiscoveredColumn, ...]:
    """Every discovered column of the warehouse, in the order the loads added them (none before the table exists)."""
    try:
        rows = conn.execute(
            f"SELECT table_name, column_name, api_path, type, first_seen_load, first_seen_at FROM {DISCOVERED} "
            "ORDER BY first_seen_load, rowid"
        ).fetchall()
    except duckdb.CatalogException:  # a file from before discovered columns, read-only: none
        return ()
    return tuple(DiscoveredColumn(t, c, p, k, seq, utc(at)) for t, c, p, k, seq, at in rows)


@dataclass(frozen=True)
class WrittenBy:
    """The newest load that wrote (or marked rows of) one table, as lms._load_runs has it."""

    seq: int
    counts: dict[str, int]  # the table's counts in that load: inserted, deleted, ...
    complete: bool  # the table was a complete snapshot of that load
    content: str | None  # the digest of the table's rows in that load (snapshot tables), if recorded


def newest_loads(conn: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, WrittenBy]:
    """Per table, the newest load that wrote it; a table no load wrote is absent. One read of lms._load_runs,
    newest first, for every table (not a JSON query per table), stopping once each table is found: usually
    within the last run's loads."""
    wanted, found = set(tables), dict[str, WrittenBy]()
    below = None  # keyset paging on load_seq: a load committed meanwhile cannot shift what is read next
    while wanted - found.keys():
        rows = conn.execute(
            f"SELECT load_seq, tables, complete_snapshots FROM {LOAD_RUNS} "
            "WHERE ? IS NULL OR load_seq < ? ORDER BY load_seq DESC LIMIT ?",
            [below, below, LOADS_PER_READ],
        ).fetchall()
        for below, written, complete in rows:
            by_table = _json(written)
            for table in wanted - found.keys():
                if by_table.get(table) is not None:
                    counts = dict(by_table[table])
                    content = counts.pop("content", None)
                    found[table] = WrittenBy(below, counts, table in complete, content)
        if len(rows) < LOADS_PER_READ:
            break
    return found


def tables_changed_by_run(conn: duckdb.DuckDBPyConnection, run_id: str) -> set[str]:
    """The tables of which a load of Dagster run `run_id` inserted, updated or deleted a row (a row only seen
    again, its last_loaded_at moved, is no change)."""
    rows = conn.execute(f"SELECT tables FROM {LOAD_RUNS} WHERE run_id = ?", [run_id]).fetchall()
    return {table for (written,) in rows for table in changed_tables(_json(written) or {})}


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def applied_loads(conn: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """load_seq -> load_id of every load this warehouse has committed."""
    return dict(conn.execute(f"SELECT load_seq, load_id FROM {LOAD_RUNS}").fetchall())


def last_load_time(conn: duckdb.DuckDBPyConnection) -> datetime | None:
    value = conn.execute(f"SELECT max(committed_at) FROM {LOAD_RUNS}").fetchall()[0][0]
    return utc(value) if value is not None else None


def next_load_time(conn: duckdb.DuckDBPyConnection, now: datetime) -> datetime:
    """The time of the next load: `now`, but strictly after the last one, even if the clock stepped back."""
    now = now.astimezone(UTC)
    previous = last_load_time(conn)
    return max(now, previous + timedelta(microseconds=1)) if previous else now


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)
