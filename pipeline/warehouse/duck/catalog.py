"""Reading table definitions back from the DuckDB catalog (a few bulk queries: DuckDB's catalog
functions cost milliseconds per call, and a commit looks at every table).

A sync reads the catalog many times (every commit several times, every asset check once per table and check),
and duckdb_columns() and duckdb_constraints() are the slow calls. Each read starts with duckdb_tables() alone: its `sql` column is the table's CREATE statement as DuckDB holds it now (columns,
types, NOT NULL and any primary key; DuckDB rewrites it on ADD COLUMN, ADD PRIMARY KEY and rollbacks), so
together with the comment and the registry rows (kind, cursor field, parent, key) it determines the TableDefs
exactly. Definitions already derived from
the same text are reused (`_DERIVED`); anything else (a new table, a new column, a new comment or
registry row, another file) misses and is read in full. No invalidation is needed: the key is the
catalog itself, as this connection sees it now."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import duckdb

from pipeline.warehouse.duck.tabledef import REGISTRY, SCHEMA, TableDef

_DATA_TABLES = "database_name = current_database() AND schema_name = $schema AND NOT starts_with(table_name, '_')"


def read_table_def(conn: duckdb.DuckDBPyConnection, name: str) -> TableDef | None:
    """The table `lms.<name>` as it is in the file, or None. Taken from the whole catalog: a process derives that
    once and reuses it for every table instead of deriving each table anew."""
    return next((table for table in _read(conn) if table.name == name), None)


def read_catalog(conn: duckdb.DuckDBPyConnection) -> tuple[TableDef, ...]:
    """Every data table of schema `lms` (internal `_` tables excluded), by name."""
    return _read(conn)


# (tables' name, comment, CREATE sql; registry rows) -> TableDefs; a few entries: one file's catalog, and
# the one it had before a schema change
_DERIVED: dict[tuple[object, ...], tuple[TableDef, ...]] = {}
_DERIVED_MAX = 32
READS = {"full": 0, "reused": 0}  # catalog reads of this process (tests and benchmarks count them)


# The catalog a block promised not to change (catalog_unchanged), with the connection it was read on.
_UNCHANGED: ContextVar[tuple[duckdb.DuckDBPyConnection, tuple[TableDef, ...]] | None] = ContextVar(
    "lessonsync_catalog_unchanged", default=None
)


@contextmanager
def catalog_unchanged(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Within the block, the catalog of `conn` is read once, for work that changes no table: the asset checks read
    it dozens of times a run (duckdb_tables() and the registry each time). A table created or altered on `conn`
    inside the block would not be seen."""
    previous = _UNCHANGED.get()
    _UNCHANGED.set((conn, _read(conn)))
    try:
        yield
    finally:  # set, not reset: a generator's block may end in another context than it began in
        _UNCHANGED.set(previous)


def _read(conn: duckdb.DuckDBPyConnection) -> tuple[TableDef, ...]:
    unchanged = _UNCHANGED.get()
    if unchanged is not None and unchanged[0] is conn:
        return unchanged[1]
    where, params = _DATA_TABLES, {"schema": SCHEMA}
    found = conn.execute(
        f"SELECT table_name, coalesce(comment, ''), sql FROM duckdb_tables() WHERE {where} ORDER BY table_name", params
    ).fetchall()
    if not found:
        return ()
    facts = _registry(conn)
    key = (tuple(found), tuple(sorted(facts.items(), key=lambda item: item[0])))
    derived = _DERIVED.get(key)
    if derived is not None:
        READS["reused"] += 1
        return derived
    READS["full"] += 1
    derived = _derive(conn, where, params, [(table, comment) for table, comment, _ in found], facts)
    if len(_DERIVED) >= _DERIVED_MAX:
        _DERIVED.clear()
    _DERIVED[key] = derived
    return derived


# kind, cursor field, parent, key (None: a registry written before keys were kept there)
RegistryFacts = tuple[str, str | None, str | None, tuple[str, ...] | None]


def _registry(conn: duckdb.DuckDBPyConnection) -> dict[str, RegistryFacts]:
    """table -> (kind, cursor_field, parent, key tuple or None) from the registry."""
    try:  # write paths create the registry first (state.ensure_state_tables); a failed query would abort them
        rows = conn.execute(f"SELECT * FROM {REGISTRY}").fetchall()
        names = [d[0] for d in conn.description]
    except duckdb.CatalogException:  # read-only look at a file written before any table was registered
        return {}
    facts: dict[str, RegistryFacts] = {}
    for row in rows:
        record = dict(zip(names, row, strict=True))
        key = record.get("key")  # None: a registry written before keys were kept there (schema.REGISTRY_KEY_COLUMN)
        facts[record["table_name"]] = (
            record["kind"],
            record["cursor_field"],
            record["parent"],
            None if key is None else tuple(key),
        )
    return facts


def _derive(
    conn: duckdb.DuckDBPyConnection,
    where: str,
    params: dict[str, str],
    tables: list[tuple[str, str]],
    facts: dict[str, RegistryFacts],
) -> tuple[TableDef, ...]:
    columns = dict(
        conn.execute(
            f"SELECT table_name, list((column_name, data_type) ORDER BY column_index) FROM duckdb_columns() "
            f"WHERE {where} GROUP BY table_name",
            params,
        ).fetchall()
    )
    declared = dict(
        conn.execute(  # primary keys of tables written before 2026-11-25 (schema.drop_primary_key)
            f"SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE {where} "
            "AND constraint_type = 'PRIMARY KEY'",
            params,
        ).fetchall()
    )
    derived = []
    for table, comment in tables:
        kind, cursor_field, parent, key = facts.get(table, ("", None, None, None))
        derived.append(
            TableDef(
                table,
                tuple((c["column_name"], c["data_type"]) if isinstance(c, dict) else tuple(c) for c in columns[table]),
                key if key is not None else tuple(declared.get(table, ())),
                comment,
                kind,
                cursor_field,
                parent,
                declared_primary_key=table in declared,
                key_unregistered=bool(kind) and key is None,
            )
        )
    return tuple(derived)
