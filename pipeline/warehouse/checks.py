"""SQL helpers for asset checks: each takes a connection and returns a count, so a Dagster check is a
one-liner (`passed=duplicate_keys(conn, "answers") == 0`). Rows marked deleted are ignored unless a
function says otherwise.

Cost: a check must not cost more than the load it follows.
- Keys: a declared PRIMARY KEY is enforced by DuckDB on every write (unique, and NOT NULL on each key
  column), so `duplicate_keys` / `null_keys` over columns covered by it are 0 by construction and read
  no rows (`trust_primary_key=False` scans anyway). Tables without one are scanned.
- Links: `orphans(..., touched_since=T)` looks only at child rows a load wrote at or after T (their
  `last_loaded_at`). That finds every orphan a load can create as long as parent rows are never deleted
  (the parent has no `deleted_at`); with a parent that keeps deleted rows it checks every row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import duckdb

from pipeline.warehouse.arrow_types import q
from pipeline.warehouse.catalog import read_table_def
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.schema import DELETED_AT, LAST_LOADED_AT, TableDef, table_ref
from pipeline.warehouse.staging import value_range
from pipeline.warehouse.state import LOAD_RUNS


def row_count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    """Rows of `table` not marked deleted."""
    return _scalar(conn, f"SELECT count(*) FROM {table_ref(table)} AS t WHERE {_live(_table(conn, table), 't')}")


def enforced_by_primary_key(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None) -> bool:
    """True when `table` has a declared PRIMARY KEY made of columns of `key` (default: its own key)."""
    declared = _table(conn, table).key
    return bool(declared) and set(declared) <= set(key or declared)


def duplicate_keys(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None, *,
                   trust_primary_key: bool = True) -> int:
    """Key values held by more than one row (0 when the primary key holds)."""
    columns = _key(conn, table, key)
    if trust_primary_key and enforced_by_primary_key(conn, table, columns):
        return 0  # DuckDB refuses any write that would duplicate a declared primary key
    return _scalar(conn, f"SELECT count(*) FROM (SELECT {', '.join(q(k) for k in columns)} FROM {table_ref(table)} "
                         f"GROUP BY ALL HAVING count(*) > 1)")


def null_keys(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None, *,
              trust_primary_key: bool = True) -> int:
    """Rows with a null in any key column."""
    columns = _key(conn, table, key)
    declared = _table(conn, table).key
    if trust_primary_key and declared and set(columns) <= set(declared):
        return 0  # primary-key columns are NOT NULL in DuckDB
    nulls = " OR ".join(f"{q(k)} IS NULL" for k in columns)
    return _scalar(conn, f"SELECT count(*) FROM {table_ref(table)} WHERE {nulls}")


def orphans(conn: duckdb.DuckDBPyConnection, child: str, parent: str, on: Mapping[str, str] | Sequence[str], *,
            touched_since: datetime | None = None) -> int:
    """Live rows of `child` with no live `parent` row. `on` maps child columns to parent columns, or
    lists columns with the same name in both (answers -> active_lessons on ["user_id", "lesson_id"]).
    With `touched_since`, only child rows loaded at or after that instant are looked at, unless parent
    rows can be marked deleted (then every child row could have lost its parent: all are checked)."""
    pairs = dict(on) if isinstance(on, Mapping) else {c: c for c in on}
    child_def, parent_def = _table(conn, child), _table(conn, parent)
    match = " AND ".join(f"c.{q(cc)} = p.{q(pc)}" for cc, pc in pairs.items())
    if touched_since is None or parent_def.has_deleted_at:
        return _scalar(conn, f"SELECT count(*) FROM {table_ref(child)} AS c WHERE {_live(child_def, 'c')} "
                             f"AND NOT EXISTS (SELECT 1 FROM {table_ref(parent)} AS p WHERE {match} "
                             f"AND {_live(parent_def, 'p')})")
    # The rows a load wrote are few: they are the hash table, and the parent table is only scanned where its
    # first linked column lies within their range (a parent kept in key order skips the rest).
    child_column, parent_column = next(iter(pairs.items()))
    touched = (f"(SELECT * FROM {table_ref(child)} AS c WHERE {_live(child_def, 'c')} "
               f"AND c.{q(LAST_LOADED_AT)} >= $since)")
    parents = (f"(SELECT 1 AS _found, * FROM {table_ref(parent)} AS p WHERE {_live(parent_def, 'p')} "
               f"AND p.{q(parent_column)} BETWEEN $lowest AND $highest)")
    return int(conn.execute(f"SELECT count(*) FROM {touched} AS c LEFT JOIN {parents} AS p ON {match} "
                            f"WHERE p._found IS NULL",
                            {"since": touched_since, **value_range(conn, touched, child_column, {"since": touched_since})}
                            ).fetchone()[0])


def last_load_time(conn: duckdb.DuckDBPyConnection, table: str) -> datetime | None:
    """Load time of the newest load that wrote `table` (its rows carry it in last_loaded_at)."""
    row = conn.execute(f"SELECT max(committed_at) FROM {LOAD_RUNS} WHERE json_exists(tables, ?)",
                       [f"$.{table}"]).fetchone()
    return row[0] if row else None


def _table(conn: duckdb.DuckDBPyConnection, name: str) -> TableDef:
    table = read_table_def(conn, name)
    if table is None:
        raise SchemaError(f"table lms.{name} does not exist; has the sync run yet?")
    return table


def _key(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None) -> Sequence[str]:
    columns = key or _table(conn, table).key
    if not columns:
        raise SchemaError(f"table lms.{table} has no primary key; pass the key columns to check.")
    return columns


def _live(table: TableDef, alias: str) -> str:
    return f"{alias}.{q(DELETED_AT)} IS NULL" if table.has_deleted_at else "TRUE"


def _scalar(conn: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])
