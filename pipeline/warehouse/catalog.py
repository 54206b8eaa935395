"""Reading table definitions back from the DuckDB catalog (a few bulk queries: DuckDB's catalog
functions cost milliseconds per call, and a commit looks at every table)."""

from __future__ import annotations

import duckdb

from pipeline.warehouse.tabledef import REGISTRY, SCHEMA, TableDef

_DATA_TABLES = "database_name = current_database() AND schema_name = $schema AND NOT starts_with(table_name, '_')"


def read_table_def(conn: duckdb.DuckDBPyConnection, name: str) -> TableDef | None:
    """The table `lms.<name>` as it is in the file, or None."""
    found = _read(conn, name)
    return found[0] if found else None


def read_catalog(conn: duckdb.DuckDBPyConnection) -> tuple[TableDef, ...]:
    """Every data table of schema `lms` (internal `_` tables excluded), by name."""
    return _read(conn, None)


def _read(conn: duckdb.DuckDBPyConnection, name: str | None) -> tuple[TableDef, ...]:
    where = _DATA_TABLES + (" AND table_name = $name" if name is not None else "")
    params: dict[str, str] = {"schema": SCHEMA, **({"name": name} if name is not None else {})}
    tables = conn.execute(f"SELECT table_name, coalesce(comment, '') FROM duckdb_tables() WHERE {where} "
                          "ORDER BY table_name", params).fetchall()
    if not tables:
        return ()
    columns = dict(conn.execute(
        f"SELECT table_name, list((column_name, data_type) ORDER BY column_index) FROM duckdb_columns() "
        f"WHERE {where} GROUP BY table_name", params).fetchall())
    keys = dict(conn.execute(
        f"SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE {where} "
        "AND constraint_type = 'PRIMARY KEY'", params).fetchall())
    try:  # write paths create the registry first (state.bootstrap); a failed query would abort their transaction
        facts = {row[0]: row[1:] for row in conn.execute(f"SELECT * FROM {REGISTRY}").fetchall()}
    except duckdb.CatalogException:  # read-only look at a file written before any table was registered
        facts = {}
    return tuple(
        TableDef(table, tuple((c["column_name"], c["data_type"]) if isinstance(c, dict) else tuple(c)
                              for c in columns[table]),
                 tuple(keys.get(table, ())), comment, *facts.get(table, ("", None, None)))
        for table, comment in tables)
