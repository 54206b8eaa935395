"""A big first load with bounded memory: the primary-key index is built in key-ordered slices, each in
its own transaction followed by a CHECKPOINT, into a shadow table nobody reads; the load's one
transaction then swaps the shadow tables in (DROP the empty table, RENAME the shadow) with the cursor.

Why: DuckDB keeps the ART index of rows inserted by a transaction in memory until that transaction has
committed and been checkpointed (then its blocks are on disk, buffer-managed and evictable). One
transaction inserting ~10M answers and ~12M answer results therefore needs their whole index in RAM
(several GB, beyond memory_limit: "failed to pin block" at COMMIT). Slices of `slice_rows` rows in key
order only ever add to the right edge of the index, so each slice holds its own part of it, and after the
checkpoint the next slice starts from an index on disk.

Crash safety is unchanged: the slices only ever write `lms._first_<table>` tables, which no reader and no
other load looks at. A crash while slicing leaves the old (empty) tables and the old cursor; the next
writer drops the leftovers. The rows become the table, and the cursor moves, in the load's one
transaction (apply.apply_load), exactly as before: old cursor with old rows, or new cursor with new rows.

Used only when every table the load upserts (and every child table it may replace) is empty and the load
has at least min(`slice_rows`, MIN_ROWS) rows; replays and rebuilds take the same path, so they stay within
memory too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from pipeline.warehouse import hooks
from pipeline.warehouse.arrow_types import q
from pipeline.warehouse.lake import check_parts
from pipeline.warehouse.lakestore import LakeStore
from pipeline.warehouse.manifest import LoadPlan, TableLoad
from pipeline.warehouse.schema import SCHEMA, TableDef, create_table, ensure_tables, table_ref
from pipeline.warehouse.tabledef import FIRST_LOADED_AT, LAST_LOADED_AT

SHADOW_PREFIX = "_first_"
_SORTED = "_first_load_sorted"
DEFAULT_SLICE_ROWS = 500_000
# From this many rows on, a first load takes this path (in one slice up to slice_rows), so every table of
# some size (active lessons, the groups snapshot) is built the same way: in key order, index checkpointed.
MIN_ROWS = 100_000
# The slices need little memory (one slice's index at a time; the key-ordered sort spills to temp_directory), so a
# first load runs under a lower limit when the connection's own is higher: DuckDB otherwise fills whatever it is
# given with cached table and sort blocks (3M answers + 4M results: commit peak RSS 1,737 MiB under 2GB, 737 MiB
# under 512MB). 400 MiB: the large full sync's peak RSS 1,067-1,095 MiB under 512 MiB, 1,014 MiB under 400 MiB,
# commit no slower (94.7 s against 97-102 s). Not lower: the dedupe-and-sort of a large full sync's 9.7M answers
# failed to pin a block under 300MB (the 3M-row test had passed under 256MB). The limit must also hold one
# slice's index while it is built (up to ~390 bytes per composite key), hence FIRST_LOAD_BYTES_PER_ROW per
# slice row when that is more.
# Incremental loads keep the connection's limit: they need room for the index blocks their inserts touch
# (docs/warehouse.md).
FIRST_LOAD_MEMORY_LIMIT = 400 * 2**20
FIRST_LOAD_BYTES_PER_ROW = 600


def first_load_memory_limit(slice_rows: int) -> str:
    """DuckDB memory_limit for building shadow tables in slices of `slice_rows` rows."""
    return f"{max(FIRST_LOAD_MEMORY_LIMIT, FIRST_LOAD_BYTES_PER_ROW * slice_rows)}B"


def shadow_name(table: str) -> str:
    return SHADOW_PREFIX + table


def drop_leftovers(conn: duckdb.DuckDBPyConnection) -> None:
    """Shadow tables of a first load that never reached its commit (they hold nothing committed)."""
    leftovers = conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND starts_with(table_name, ?)", [SCHEMA, SHADOW_PREFIX]).fetchall()
    for (name,) in leftovers:
        conn.execute(f"DROP TABLE {table_ref(name)}")


def prebuild(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, lake: LakeStore, strategy: str,
             slice_rows: int | None, memory_limit: str | None = None) -> dict[str, str]:
    """Outside any transaction: build the shadow tables of a big first load; returns table -> shadow.
    Returns {} (nothing done) when the load is not a big first load. `memory_limit` is the connection's own
    (DuckDB syntax); the slices run under min(it, first_load_memory_limit(slice_rows)), then it is set back."""
    drop_leftovers(conn)
    upserted = [t for t in plan.tables if t.kind != "append" and t.parts]
    if strategy != "auto" or not slice_rows or not upserted or any(not t.key for t in upserted):
        return {}
    if sum(part.rows for t in upserted for part in t.parts) < min(slice_rows, MIN_ROWS):
        return {}
    catalog = ensure_tables(conn, plan.catalog)  # the tables as they were at that commit (empty ones harmless)
    involved = {t.name for t in upserted} | {link.child for link in plan.children}
    if not all(_is_empty(conn, name) for name in involved if name in catalog):
        return {}
    shadows: dict[str, str] = {}
    with capped_memory(conn, memory_limit, first_load_memory_limit(slice_rows)):
        for load in upserted:
            shadows[load.name] = _build(conn, plan, load, catalog[load.name], lake, slice_rows)
    return shadows


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b|bytes)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def size_bytes(text: str) -> int | None:
    """'2GB' -> 2_000_000_000, '512MiB' -> 536_870_912 (DuckDB's units); None for anything else ('80%')."""
    match = _SIZE.match(text)
    if not match:
        return None
    return int(float(match[1]) * _UNITS[(match[2] or "b").lower()])


@contextmanager
def capped_memory(conn: duckdb.DuckDBPyConnection, configured: str | None, cap: str) -> Iterator[None]:
    """Run the block under `cap` when the connection's configured limit is known and higher, then set the
    configured limit back (also on errors)."""
    have, most = (size_bytes(configured) if configured else None), size_bytes(cap)
    if have is None or most is None or have <= most:
        yield
        return
    conn.execute(f"SET memory_limit = '{cap}'")
    try:
        yield
    finally:
        conn.execute(f"SET memory_limit = '{configured}'")


def swap_in(conn: duckdb.DuckDBPyConnection, table: str, shadow: str) -> int:
    """Inside the load's transaction: the shadow becomes the table; returns its row count."""
    conn.execute(f"DROP TABLE {table_ref(table)}")
    conn.execute(f"ALTER TABLE {table_ref(shadow)} RENAME TO {q(table)}")
    return int(conn.execute(f"SELECT count(*) FROM {table_ref(table)}").fetchone()[0])


def _is_empty(conn: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(conn.execute(f"SELECT count(*) = 0 FROM {table_ref(name)}").fetchone()[0])


def _build(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, load: TableLoad, target: TableDef, lake: LakeStore,
           slice_rows: int) -> str:
    from pipeline.warehouse.staging import deduped_sql  # staging imports this module's callers
    from pipeline.warehouse.upsert import ts_literal

    files = check_parts(lake, load.parts, f"load {plan.seq} ({plan.load_id})", conn)
    shadow = shadow_name(load.name)
    key = ", ".join(q(k) for k in load.key)
    # one row per key, cast, in key order (sorting spills to temp_directory); rowid = position in that order
    conn.execute(f"DROP TABLE IF EXISTS temp.{q(_SORTED)}")
    conn.execute(f"CREATE TEMP TABLE {q(_SORTED)} AS SELECT * FROM ({deduped_sql(load, target)}) ORDER BY {key}",
                 {"files": files})
    rows = int(conn.execute(f"SELECT count(*) FROM temp.{q(_SORTED)}").fetchone()[0])
    create_table(conn, TableDef(shadow, target.columns, target.key, target.comment))
    columns = ", ".join(q(c) for c in load.columns)
    ts = ts_literal(plan.loaded_at)
    for start in range(0, rows, slice_rows):
        conn.begin()
        try:
            conn.execute(
                f"INSERT INTO {table_ref(shadow)} ({columns}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)}) "
                f"SELECT {columns}, {ts}, {ts} FROM temp.{q(_SORTED)} WHERE rowid >= ? AND rowid < ? ORDER BY {key}",
                [start, start + slice_rows])
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        conn.execute("CHECKPOINT")  # the slice's index goes to disk; its memory can be evicted
        hooks.reached("first_load_slice")
    conn.execute(f"DROP TABLE temp.{q(_SORTED)}")
    return shadow
