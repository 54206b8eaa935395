"""SQL helpers for asset checks: each takes a connection and returns a count, so a Dagster check is a
one-liner (`passed=duplicate_keys(conn, "answers") == 0`). Rows marked deleted are ignored unless a
function says otherwise.

Cost: a check must not cost more than the load it follows.
- Keys: the tables declare no PRIMARY KEY (duck/schema.py says why); a load keeps one row per key, and
  `duplicate_keys(..., touched_since=T)` looks at the keys of the rows a load wrote at or after T (any key a
  load duplicated is among them), matched against the table within their range of the first key column.
  Without `touched_since`, or when the load touched more than `max_touched` rows or half the table, every row is
  grouped at once: the grouping hashes the key to 64 bits first (duplicated_values), so its hash table is small
  and spills within the memory limit. `null_keys` is a plain filter.
- Links: `orphans(..., touched_since=T)` looks only at child rows a load wrote at or after T (their
  `last_loaded_at`). That finds every orphan a load can create as long as parent rows are never deleted
  (the parent has no `deleted_at`); with a parent that keeps deleted rows it checks every row."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.catalog import read_table_def
from pipeline.warehouse.duck.connection import repeats_any, scalar
from pipeline.warehouse.duck.ranges import key_ranges, range_bounds
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.duck.tabledef import DELETED_AT, LAST_LOADED_AT, TableDef
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.merge.staging import value_range
from pipeline.warehouse.merge.state import LOAD_RUNS, newest_loads


def row_count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    """Rows of `table` not marked deleted."""
    return live_rows(conn, _table(conn, table))


def live_rows(conn: duckdb.DuckDBPyConnection, table: TableDef) -> int:
    """Rows of `table`, as read from the catalog already, not marked deleted."""
    return _count(conn, f"SELECT count(*) FROM {table_ref(table.name)} AS t WHERE {_live(table, 't')}")


# A link check hashes the parents' link columns; with more rows than this on both sides (a large full sync's answer
# results against its answers: a hash table of gigabytes) it runs in ranges of the first linked column. Each range
# scans both tables whole (first loads are in no key order, so no row group is skipped), but a range's hash table
# fits the default memory limit instead of spilling, which makes the ranges faster than one join.
ORPHAN_CHUNK_ROWS = 1_000_000
# A key check hashes the touched keys themselves when a load touched at most this many (fewer than half the table).
MAX_TOUCHED_KEYS = 2_000_000

# Which side of an orphan check's join is hashed. With a LEFT JOIN DuckDB hashed the parents even for a handful of
# children (the estimate of a filter on last_loaded_at is no help): a 1%-change sync hashed every answer, spilling,
# to match a few thousand touched results. NOT EXISTS hashes the distinct child keys instead, but costs far more
# when the children are many. So children at most a quarter of the parents go by NOT EXISTS, the rest by the
# LEFT JOIN.
FEW_CHILDREN = 4


def duplicate_keys(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    key: Sequence[str] | None = None,
    *,
    touched_since: datetime | None = None,
    max_touched: int = MAX_TOUCHED_KEYS,
) -> int:
    """Key values held by more than one row (deleted rows included: a key has one row, live or not). With
    `touched_since`, only keys of rows loaded at or after that instant are looked at (a load that duplicated
    a key wrote one of its rows), unless that is more than `max_touched` rows or half the table or more; then, as
    without it, every row is grouped at once (by a 64-bit hash of the key, which spills within the memory limit
    and is faster than ranges of the table)."""
    columns = _key(conn, table, key)
    keys, first = ", ".join(q(k) for k in columns), q(columns[0])
    if touched_since is not None:
        touched = f"(SELECT {keys} FROM {table_ref(table)} WHERE {q(LAST_LOADED_AT)} >= $since)"
        count = _count(conn, f"SELECT count(*) FROM {touched}", {"since": touched_since})
        if count == 0:
            return 0
        # A load that wrote most of the table (a first load) is checked like every row: one grouping of the table
        # costs less than hashing the touched keys, probing the table with them and grouping what matched.
        if count <= max_touched and 2 * count < _count(conn, f"SELECT count(*) FROM {table_ref(table)}"):
            # the touched keys are the hash table; the table is scanned within their range
            extent = value_range(conn, touched, columns[0], {"since": touched_since})
            match = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in columns)
            return _count(
                conn,
                f"SELECT count(*) FROM (SELECT {keys} FROM {table_ref(table)} AS t "
                f"WHERE {first} BETWEEN $lowest AND $highest AND EXISTS "
                f"(SELECT 1 FROM {touched} AS s WHERE {match}) GROUP BY ALL HAVING count(*) > 1)",
                {"since": touched_since, **extent},
            )
    return duplicated_values(conn, table_ref(table), columns)


def duplicated_values(
    conn: duckdb.DuckDBPyConnection, rows: str, columns: Sequence[str], params: dict[str, object] | None = None
) -> int:
    """How many distinct values of `columns` (NULL counts as a value) more than one row of `rows` (a relation or
    subquery) holds. The distinct 64-bit hash() values of the columns are counted first (repeats_any), a fraction
    of what grouping the columns themselves costs in memory and time; only when some hash occurs twice (usually none
    does) are the rows
    with such a hash grouped by the columns themselves, so a collision costs a little work, never a wrong count."""
    values = ", ".join(q(c) for c in columns)
    if not repeats_any(conn, f"hash({values})", f"{rows} AS r", params):
        return 0
    hashes = f"SELECT hash({values}) AS _key_hash FROM {rows} AS r GROUP BY ALL HAVING count(*) > 1"
    return _count(
        conn,
        f"SELECT count(*) FROM (SELECT {values} FROM {rows} AS r WHERE hash({values}) IN "
        f"(SELECT _key_hash FROM ({hashes})) GROUP BY ALL HAVING count(*) > 1)",
        params,
    )


def null_keys(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None) -> int:
    """Rows with a null in any key column (a filter, no hash table; the key columns are NOT NULL too)."""
    columns = _key(conn, table, key)
    nulls = " OR ".join(f"{q(k)} IS NULL" for k in columns)
    return _count(conn, f"SELECT count(*) FROM {table_ref(table)} WHERE {nulls}")


def orphans(
    conn: duckdb.DuckDBPyConnection,
    child: str,
    parent: str,
    on: Mapping[str, str] | Sequence[str],
    *,
    touched_since: datetime | None = None,
    chunk_rows: int = ORPHAN_CHUNK_ROWS,
) -> int:
    """Live rows of `child` with no live `parent` row. `on` maps child columns to parent columns, or
    lists columns with the same name in both (answers -> active_lessons on ["user_id", "lesson_id"]).
    With `touched_since`, only child rows loaded at or after that instant are looked at, unless parent
    rows can be marked deleted (then every child row could have lost its parent: all are checked).
    Memory stays bounded: with more than `chunk_rows` rows on both sides the join runs range by range of
    the first linked column (a child row whose first linked column is NULL has no parent: counted too)."""
    pairs = dict(on) if isinstance(on, Mapping) else {c: c for c in on}
    child_def, parent_def = _table(conn, child), _table(conn, parent)
    match = " AND ".join(f"c.{q(cc)} = p.{q(pc)}" for cc, pc in pairs.items())
    scoped = touched_since is not None and not parent_def.has_deleted_at
    params: dict[str, object] = {"since": touched_since} if scoped else {}
    since = f" AND c.{q(LAST_LOADED_AT)} >= $since" if scoped else ""
    children = f"(SELECT * FROM {table_ref(child)} AS c WHERE {_live(child_def, 'c')}{since})"
    child_column, parent_column = next(iter(pairs.items()))
    c_col, p_col = f"c.{q(child_column)}", f"p.{q(parent_column)}"

    counted, nulls = conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {c_col} IS NULL) FROM {children} AS c", params
    ).fetchall()[0]
    counted, nulls = int(counted), int(nulls)
    parents = live_rows(conn, parent_def)
    few_children = counted * FEW_CHILDREN <= parents

    def unmatched(child_range: str, parent_range: str, extra: dict[str, object]) -> int:
        in_range = f"{table_ref(parent)} AS p WHERE {_live(parent_def, 'p')} AND {parent_range}"
        if few_children:  # the distinct child keys are hashed; the parent scan probes them
            sql = (
                f"SELECT count(*) FROM {children} AS c WHERE {child_range} AND NOT EXISTS "
                f"(SELECT 1 FROM {in_range} AND {match})"
            )
        else:  # the parents are hashed
            sql = (
                f"SELECT count(*) FROM (SELECT * FROM {children} AS c WHERE {child_range}) AS c "
                f"LEFT JOIN (SELECT 1 AS _found, * FROM {in_range}) AS p ON {match} WHERE p._found IS NULL"
            )
        return int(conn.execute(sql, {**params, **extra}).fetchall()[0][0])

    bounds = None if parents <= chunk_rows else range_bounds(conn, children, c_col, params, chunk_rows)
    if bounds is None:  # one join, only where the parent's first linked column lies within the children's range
        extent = value_range(conn, children + " AS c", child_column, params)
        if extent["lowest"] is None:
            return nulls
        return nulls + unmatched(
            f"{c_col} BETWEEN $lowest AND $highest", f"{p_col} BETWEEN $lowest AND $highest", extent
        )
    return nulls + sum(
        unmatched(child_range, child_range.replace(c_col, p_col), extra)
        for child_range, extra in key_ranges(bounds, c_col)
    )


def last_load_time(conn: duckdb.DuckDBPyConnection, table: str) -> datetime | None:
    """Load time of the newest load that wrote `table` (the rows it wrote carry it in last_loaded_at)."""
    row = conn.execute(
        f"SELECT max(committed_at) FROM {LOAD_RUNS} WHERE json_exists(tables, ?)", [f"$.{table}"]
    ).fetchone()
    return row[0] if row else None


def _table(conn: duckdb.DuckDBPyConnection, name: str) -> TableDef:
    table = read_table_def(conn, name)
    if table is None:
        raise SchemaError(f"table lms.{name} does not exist; has the sync run yet?")
    return table


def _key(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None) -> Sequence[str]:
    columns = key or _table(conn, table).key
    if not columns:
        raise SchemaError(f"table lms.{table} has no key; pass the key columns to check.")
    return columns


def _live(table: TableDef, alias: str) -> str:
    return f"{alias}.{q(DELETED_AT)} IS NULL" if table.has_deleted_at else "TRUE"


def _count(conn: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | None = None) -> int:
    return int(scalar(conn, sql, params))


def last_load_counts(conn: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per table, the counts (inserted, deleted, ...) of the newest load that wrote it; a table no load wrote
    is absent."""
    return {table: load.counts for table, load in newest_loads(conn, tables).items()}
