"""Fixtures of the warehouse tests: a warehouse in a tmp dir (real DuckDB file, real lake)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from warehouse_helpers import ALL_SPECS, make_warehouse

from pipeline.warehouse import Warehouse


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return make_warehouse(tmp_path)


@pytest.fixture
def seeded(wh: Warehouse) -> Iterator[Warehouse]:
    wh.ensure_tables(ALL_SPECS)
    yield wh
