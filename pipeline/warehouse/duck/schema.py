"""DuckDB tables from TableSpecs: CREATE TABLE with the load metadata columns and the key columns NOT NULL,
the key itself in the registry (lms._tables), and schema evolution by ALTER TABLE ADD COLUMN. Columns are
never dropped or retyped behind anyone's back.

No PRIMARY KEY is declared: DuckDB 2.0 does not use its ART index to look up a composite key, and every index
block an insert touches stays pinned in memory until the checkpoint, so the index made an incremental load's
memory follow the table's size (docs/warehouse.md, "Keys without an index"). Uniqueness comes from the load
(staging keeps one row per key and matches it against the table) and is checked by checks.duplicate_keys."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

import duckdb

from pipeline.contract.descriptions import column_descriptions
from pipeline.contract.tables import TableKind, TableSpec
from pipeline.warehouse.duck.arrow_types import TIMESTAMPTZ, field_type, q
from pipeline.warehouse.duck.catalog import read_catalog
from pipeline.warehouse.duck.tabledef import (  # noqa: F401  (re-exported: the names of the schema)
    DELETED_AT,
    FIRST_LOADED_AT,
    INTERNAL_COMMENTS,
    LAST_LOADED_AT,
    META_COLUMNS,
    REGISTRY,
    RESERVED_COLUMNS,
    SCHEMA,
    TableDef,
)
from pipeline.warehouse.errors import SchemaError

_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")


def table_ref(name: str) -> str:
    return f"{SCHEMA}.{q(name)}"


def check_identifier(name: str, what: str) -> None:
    if not _IDENTIFIER.match(name):
        raise SchemaError(
            f"{what} {name!r} is not a valid name: use lower-case letters, digits and '_', starting with a letter."
        )


def keeps_deleted_rows(kind: TableKind, parent: str | None) -> bool:
    """Snapshot tables and child tables mark vanished rows with deleted_at instead of dropping them."""
    return kind == "snapshot" or parent is not None


def table_def(spec: TableSpec) -> TableDef:
    """The DuckDB definition of `spec`: its data columns in order, then the load metadata columns."""
    check_identifier(spec.name, "table")
    columns = []
    for field in spec.schema:
        check_identifier(field.name, f"table {spec.name}: column")
        if field.name in RESERVED_COLUMNS:
            raise SchemaError(
                f"table {spec.name}: column {field.name!r} clashes with a warehouse column; "
                "rename it in the table spec."
            )
        columns.append((field.name, field_type(field, spec.name)))
    meta = [(FIRST_LOADED_AT, TIMESTAMPTZ), (LAST_LOADED_AT, TIMESTAMPTZ)]
    if keeps_deleted_rows(spec.kind, spec.parent):
        meta.append((DELETED_AT, TIMESTAMPTZ))
    described = column_descriptions(spec)
    return TableDef(
        spec.name,
        tuple(columns + meta),
        tuple(spec.key),
        spec.description,
        spec.kind,
        spec.cursor_field,
        spec.parent,
        column_comments=tuple((name, described[name]) for name, _ in columns + meta if name in described),
    )


def ensure_tables(conn: duckdb.DuckDBPyConnection, wanted: Iterable[TableDef]) -> dict[str, TableDef]:
    """Create each wanted table, or add the columns it has and the table lacks (at the end, in order).
    Returns every data table as it is afterwards."""
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    conn.execute(REGISTRY_DDL)
    wanted = list(wanted)
    existing = {t.name: t for t in read_catalog(conn)}
    changed = [_ensure(conn, table, existing.get(table.name)) for table in wanted]
    set_comments(conn, wanted)
    return {t.name: t for t in read_catalog(conn)} if any(changed) else existing


def set_comments(conn: duckdb.DuckDBPyConnection, tables: list[TableDef]) -> None:
    """COMMENT ON COLUMN for each described column of `tables`, and COMMENT ON TABLE/COLUMN for the internal
    tables, where the comment differs: one catalog read when none does."""
    described = [(t.name, column, text) for t in tables for column, text in t.column_comments]
    described += [
        (table, column, text)
        for table, (about, columns) in INTERNAL_COMMENTS.items()
        for column, text in [("", about), *columns.items()]
    ]
    current = {
        (table, column): comment or ""
        for table, column, comment in conn.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = $1 "
            "UNION ALL SELECT table_name, '', comment FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = $1",
            [SCHEMA],
        ).fetchall()
    }
    for table, column, text in described:
        if current.get((table, column), text) != text:
            escaped = text.replace("'", "''")
            target = f"TABLE {table_ref(table)}" if not column else f"COLUMN {table_ref(table)}.{q(column)}"
            conn.execute(f"COMMENT ON {target} IS '{escaped}'")


def _ensure(conn: duckdb.DuckDBPyConnection, wanted: TableDef, existing: TableDef | None) -> bool:
    if existing is None:
        create_table(conn, wanted)
        _register(conn, wanted)
        return True
    migrate = existing.key_unregistered or (existing.declared_primary_key and bool(existing.kind))
    if existing.declared_primary_key and bool(existing.kind):  # registered: this package's own table
        drop_primary_key(conn, existing)
    # An empty key on either side is an unknown one, not a change: a table registered before keys were whose
    # PRIMARY KEY did not survive (DuckDB 2.0.1 loses one added by ALTER TABLE ADD PRIMARY KEY when the file is
    # reopened, as old first loads did), or an old catalog entry or manifest recording that. The spec's key wins.
    if existing.key != wanted.key and existing.key and wanted.key:
        raise SchemaError(
            f"table {wanted.name}: the warehouse has key {list(existing.key)} but the "
            f"spec says {list(wanted.key)}; a key change needs a rebuild of that table "
            "(drop it and re-sync with a full refresh)."
        )
    have = dict(existing.columns)
    changed = False
    for name, type_sql in wanted.columns:
        if name not in have:
            conn.execute(f"ALTER TABLE {table_ref(wanted.name)} ADD COLUMN {q(name)} {type_sql}")
            changed = True
        elif type_sql != have[name] and normalize_type(conn, type_sql) != have[name]:
            raise SchemaError(
                f"table {wanted.name}: column {name!r} is {have[name]} in the warehouse but "
                f"{normalize_type(conn, type_sql)} in the spec; types are never changed in "
                "place: add a new column instead, or migrate the table by hand."
            )
    if wanted.comment and wanted.comment != existing.comment:
        set_comment(conn, wanted)
        changed = True
    registered = wanted if wanted.key else replace(wanted, key=existing.key)
    if migrate or (registered.key, wanted.kind, wanted.cursor_field, wanted.parent) != (
        existing.key,
        existing.kind,
        existing.cursor_field,
        existing.parent,
    ):
        _register(conn, registered)
        changed = True
    return changed


# The registry is tiny and keyed by table name (its own primary key costs nothing). `key`: the table's
# unique key columns; registries written before 2026-11-25 gain the column (REGISTRY_KEY_COLUMN) and their
# tables' keys are read from the PRIMARY KEY they still declare until drop_primary_key has rebuilt them.
REGISTRY_DDL = f"""CREATE TABLE IF NOT EXISTS {REGISTRY} (
    table_name VARCHAR PRIMARY KEY, kind VARCHAR NOT NULL, cursor_field VARCHAR, parent VARCHAR, key VARCHAR[])"""
REGISTRY_KEY_COLUMN = f"ALTER TABLE {REGISTRY} ADD COLUMN IF NOT EXISTS key VARCHAR[]"


def _register(conn: duckdb.DuckDBPyConnection, table: TableDef) -> None:
    conn.execute(
        f"INSERT INTO {REGISTRY} (table_name, kind, cursor_field, parent, key) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (table_name) DO UPDATE SET kind = excluded.kind, cursor_field = excluded.cursor_field, "
        "parent = excluded.parent, key = excluded.key",
        [table.name, table.kind, table.cursor_field, table.parent, list(table.key)],
    )


def drop_tables(conn: duckdb.DuckDBPyConnection, names: Iterable[str]) -> None:
    """Drop tables (if they exist) and forget them in the registry; inside the caller's transaction."""
    for name in names:
        conn.execute(f"DROP TABLE IF EXISTS {table_ref(name)}")
        conn.execute(f"DELETE FROM {REGISTRY} WHERE table_name = ?", [name])


def create_table(conn: duckdb.DuckDBPyConnection, table: TableDef) -> None:
    """The table with its key columns NOT NULL and no index (see the module's docstring)."""
    key = set(table.key)
    parts = [f"{q(name)} {type_sql}{' NOT NULL' if name in key else ''}" for name, type_sql in table.columns]
    conn.execute(f"CREATE TABLE {table_ref(table.name)} ({', '.join(parts)})")
    if table.comment:
        set_comment(conn, table)


def drop_primary_key(conn: duckdb.DuckDBPyConnection, table: TableDef) -> None:
    """Migrate a table written before 2026-11-25, which declared its key as PRIMARY KEY, to the index-less
    layout, inside the caller's transaction (rows and schema change together or not at all). DuckDB cannot
    ALTER TABLE DROP PRIMARY KEY, so the table is copied: a new one with the same columns (key columns NOT
    NULL) takes every row, then replaces the old one under its name. Also drops the shadow tables `_first_<table>`
    that the old sliced first load left when it crashed (they never held anything committed)."""
    copy = f"_migrating_{table.name}"
    conn.execute(f"DROP TABLE IF EXISTS {table_ref(copy)}")
    create_table(conn, TableDef(copy, table.columns, table.key))
    conn.execute(f"INSERT INTO {table_ref(copy)} SELECT * FROM {table_ref(table.name)}")
    conn.execute(f"DROP TABLE {table_ref(table.name)}")
    conn.execute(f"ALTER TABLE {table_ref(copy)} RENAME TO {q(table.name)}")
    if table.comment:
        set_comment(conn, table)
    conn.execute(f"DROP TABLE IF EXISTS {table_ref('_first_' + table.name)}")


def set_comment(conn: duckdb.DuckDBPyConnection, table: TableDef) -> None:
    text = table.comment.replace("'", "''")
    conn.execute(f"COMMENT ON TABLE {table_ref(table.name)} IS '{text}'")


def normalize_type(conn: duckdb.DuckDBPyConnection, type_sql: str) -> str:
    """DuckDB's own spelling of a type ('TIMESTAMPTZ' -> 'TIMESTAMP WITH TIME ZONE'), for comparisons."""
    return str(conn.execute(f"SELECT typeof(CAST(NULL AS {type_sql}))").fetchall()[0][0])
