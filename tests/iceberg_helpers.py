"""Reading the Iceberg mirror as an outside engine would, and comparing it with the warehouse."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog

from pipeline.contract.tables import SYNC_STATE_TABLES
from pipeline.settings import Settings
from pipeline.warehouse.duck.tabledef import LAST_LOADED_AT, SCHEMA
from pipeline.warehouse.lake.iceberg import (
    CATALOG_NAME,
    MARTS_NAMESPACE,
    IcebergLocation,
    iceberg_location,
    sqlalchemy_url,
)

ICEBERG_ENV = {"LESSONSYNC_TABLE_FORMAT": "iceberg"}  # the suite's default is off (tests/conftest.py)


def open_catalog(settings: Settings | IcebergLocation) -> SqlCatalog:
    where = iceberg_location(settings.lake) if isinstance(settings, Settings) else settings
    assert where is not None
    return SqlCatalog(
        CATALOG_NAME, uri=sqlalchemy_url(where.catalog_url), warehouse=where.location, **where.io_properties
    )


def _canonical(table: pa.Table, columns: list[str]) -> list[tuple[object, ...]]:
    table = table.select(columns)
    return sorted(tuple(row.values()) for row in table.to_pylist())


def warehouse_tables(warehouse: Path) -> dict[str, pa.Table]:
    """Every lms table as the mirror should hold it (the sync state is not mirrored): the warehouse's columns but
    last_loaded_at, JSON as text."""
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        names = [
            n
            for (n,) in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND NOT starts_with(table_name, '_')",
                [SCHEMA],
            ).fetchall()
            if n not in SYNC_STATE_TABLES
        ]
        out = {}
        for name in names:
            cols = conn.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? "
                "ORDER BY column_index",
                [SCHEMA, name],
            ).fetchall()
            select = ", ".join(
                f'CAST("{c}" AS VARCHAR) AS "{c}"' if t == "JSON" else f'"{c}"' for c, t in cols if c != LAST_LOADED_AT
            )
            out[name] = conn.sql(f'SELECT {select} FROM {SCHEMA}."{name}"').to_arrow_table()
        return out


def assert_iceberg_equals_warehouse(settings: Settings, where: IcebergLocation | None = None) -> dict[str, int]:
    """Every raw table read through pyiceberg and through polars equals the warehouse row for row."""
    return assert_mirror_equals(settings.warehouse_path, where or iceberg_location(settings.lake))


def assert_mirror_equals(warehouse: Path, where: IcebergLocation | None) -> dict[str, int]:
    assert where is not None
    catalog = open_catalog(where)
    expected = warehouse_tables(warehouse)
    assert expected, "the warehouse has no tables"
    kept_out = [name for name in SYNC_STATE_TABLES if catalog.table_exists((SCHEMA, name))]
    assert not kept_out, f"the sync state is mirrored: {kept_out}"
    rows = {}
    for name, want in expected.items():
        table = catalog.load_table((SCHEMA, name))
        got = table.scan().to_arrow()
        assert set(got.column_names) == set(want.column_names), name
        columns = want.column_names
        assert _canonical(got, columns) == _canonical(want, columns), f"iceberg {SCHEMA}.{name} differs"
        through_polars = pl.scan_iceberg(table).collect().to_arrow()
        assert _canonical(through_polars, columns) == _canonical(want, columns), f"polars {SCHEMA}.{name} differs"
        rows[name] = want.num_rows
    return rows


def assert_marts_equal(settings: Settings, marts: list[str]) -> None:
    catalog = open_catalog(settings)
    with duckdb.connect(str(settings.warehouse_path), read_only=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        for name in marts:
            want = conn.sql(f'SELECT * FROM analytics."{name}"').to_arrow_table()
            got = catalog.load_table((MARTS_NAMESPACE, name)).scan().to_arrow()
            assert _canonical(got, want.column_names) == _canonical(want, want.column_names), name


def assert_data_files_hold_the_tables_columns(settings: Settings | IcebergLocation, tables: tuple[str, ...]) -> None:
    """Each current data file of the raw `tables` (on a local disk) holds the Iceberg table's columns, in order, and
    nothing else: the digests a change is compared by are never stored."""
    catalog = open_catalog(settings)
    for name in tables:
        table = catalog.load_table((SCHEMA, name))
        columns = table.schema().column_names
        paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
        assert paths, f"{name} has no data files"
        for path in paths:
            assert pq.read_schema(path).names == columns, (name, path)
