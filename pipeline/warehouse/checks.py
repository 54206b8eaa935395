"""SQL helpers for asset checks: each takes a connection and returns a count, so a Dagster check is a
one-liner (`passed=duplicate_keys(conn, "answers") == 0`). Rows marked deleted are ignored unless a
function says otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb

from pipeline.warehouse.arrow_types import q
from pipeline.warehouse.catalog import read_table_def
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.schema import DELETED_AT, TableDef, table_ref


def row_count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    """Rows of `table` not marked deleted."""
    return _scalar(conn, f"SELECT count(*) FROM {table_ref(table)} AS t WHERE {_live(_table(conn, table), 't')}")


def duplicate_keys(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None) -> int:
    """Key values held by more than one row (0 when the primary key holds)."""
    columns = ", ".join(q(k) for k in _key(conn, table, key))
    return _scalar(conn, f"SELECT count(*) FROM (SELECT {columns} FROM {table_ref(table)} "
                         f"GROUP BY ALL HAVING count(*) > 1)")


def null_keys(conn: duckdb.DuckDBPyConnection, table: str, key: Sequence[str] | None = None) -> int:
    """Rows with a null in any key column."""
    nulls = " OR ".join(f"{q(k)} IS NULL" for k in _key(conn, table, key))
    return _scalar(conn, f"SELECT count(*) FROM {table_ref(table)} WHERE {nulls}")


def orphans(conn: duckdb.DuckDBPyConnection, child: str, parent: str, on: Mapping[str, str] | Sequence[str]) -> int:
    """Live rows of `child` with no live `parent` row. `on` maps child columns to parent columns, or
    lists columns with the same name in both (answers -> active_lessons on ["user_id", "lesson_id"])."""
    pairs = dict(on) if isinstance(on, Mapping) else {c: c for c in on}
    child_def, parent_def = _table(conn, child), _table(conn, parent)
    match = " AND ".join(f"c.{q(cc)} = p.{q(pc)}" for cc, pc in pairs.items())
    return _scalar(conn, f"SELECT count(*) FROM {table_ref(child)} AS c WHERE {_live(child_def, 'c')} AND NOT EXISTS "
                         f"(SELECT 1 FROM {table_ref(parent)} AS p WHERE {match} AND {_live(parent_def, 'p')})")


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
