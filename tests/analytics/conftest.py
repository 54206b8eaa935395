"""Fixtures for the analytics tests: real DuckDB warehouse files in tmp dirs (helpers in analytics_world.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from analytics_world import create_raw_tables

from pipeline.analytics.models import AnalyticsProject, load_project


@pytest.fixture(scope="session")
def project() -> AnalyticsProject:
    return load_project()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory whose warehouse.duckdb holds every lms table, empty."""
    directory = tmp_path / "data"
    directory.mkdir()
    create_raw_tables(directory / "warehouse.duckdb")
    return directory


@pytest.fixture
def warehouse_conn(data_dir: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
    try:
        yield conn
    finally:
        conn.close()
