"""Fixtures of the warehouse tests: a warehouse in a tmp dir (real DuckDB file, real lake)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from warehouse_helpers import ALL_SPECS, make_warehouse

from pipeline.warehouse import Warehouse
from pipeline.warehouse.lake.iceberg import IcebergLocation, IcebergMirror


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return make_warehouse(tmp_path)


@pytest.fixture
def seeded(wh: Warehouse) -> Iterator[Warehouse]:
    wh.ensure_tables(ALL_SPECS)
    yield wh


@pytest.fixture
def where(tmp_path: Path) -> IcebergLocation:
    """An Iceberg location in the tmp dir: its lake and a SQLite catalog."""
    return IcebergLocation.for_lake(tmp_path / "lake", f"sqlite:///{tmp_path / 'catalog.sqlite3'}")


@pytest.fixture
def mirrored(tmp_path: Path, where: IcebergLocation) -> Warehouse:
    """A warehouse whose tables are mirrored to Iceberg at `where`."""
    wh = make_warehouse(tmp_path, table_mirror=IcebergMirror(where))
    wh.ensure_tables(ALL_SPECS)
    return wh
