"""Assertions about a local stack, shared by the end-to-end tests (imported by name: tests/ is on sys.path)."""

from pathlib import Path

import duckdb

from pipeline.stack import Stack
from pipeline.verify import compare_warehouse

RAW = ("key:lms/*",)  # every raw table and the certificates; analytics models have their own tests


def assert_warehouse_equals_platform(stack: Stack) -> None:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim)
    unequal = [d.summary() for d in diffs if not d.equal]
    assert not unequal, "warehouse differs from the platform:\n" + "\n".join(unequal)


def digest(conn: duckdb.DuckDBPyConnection, sql_from: str, columns: str = "*") -> tuple[int, int]:
    """(rows, order-independent hash of every row) of a query: compares big tables without fetching them."""
    return conn.execute(f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) "
                        f"FROM (SELECT {columns} FROM {sql_from}) AS t").fetchone()


def digest_all(path: Path) -> dict[str, tuple[int, int]]:
    """A digest of every table of schema lms, all columns (load metadata and internal tables included)."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        names = [n for (n,) in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'lms' ORDER BY 1").fetchall()]
        return {name: digest(conn, f'lms."{name}"') for name in names}
    finally:
        conn.close()
