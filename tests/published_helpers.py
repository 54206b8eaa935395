"""Checks of the analysts' published snapshot against the warehouse it was published from."""

from __future__ import annotations

import duckdb


def assert_same_raw_tables(warehouse: duckdb.DuckDBPyConnection, snapshot: duckdb.DuckDBPyConnection) -> None:
    """Every raw table of the warehouse's schema lms, and its load log, is in the snapshot's, with the same columns,
    types and rows; the rest of the warehouse's bookkeeping (cursors, markers, discovered columns) is not published."""
    names = [
        r[0]
        for r in warehouse.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'lms'"
        ).fetchall()
    ]
    published = [n for n in names if not n.startswith("_") or n == "_load_runs"]
    assert "_load_runs" in published and any(not n.startswith("_") for n in names)
    for name in sorted(set(names) - set(published)):
        assert not snapshot.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = 'lms' AND table_name = ?", [name]
        ).fetchall(), name
    names = published
    for name in names:
        described = f'SELECT column_name, column_type FROM (DESCRIBE lms."{name}")'  # a view has no NOT NULL
        assert snapshot.execute(described).fetchall() == warehouse.execute(described).fetchall(), name
        rows = f'SELECT * FROM lms."{name}" ORDER BY ALL'
        assert snapshot.execute(rows).fetchall() == warehouse.execute(rows).fetchall(), name
