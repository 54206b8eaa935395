"""Dagster resources: where the warehouse lives and how the platform is reached. Nothing here opens a
file or a socket until an asset asks for it, so loading the code location stays cheap and side-effect free."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from dagster import ConfigurableResource


class WarehouseResource(ConfigurableResource):
    """The DuckDB warehouse and the Parquet lake under one data directory."""

    data_dir: str = "data"

    @property
    def path(self) -> Path:
        return Path(self.data_dir) / "warehouse.duckdb"

    @property
    def lake_dir(self) -> Path:
        return Path(self.data_dir) / "lake"

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection, closed on exit."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = duckdb.connect(str(self.path))
        try:
            yield conn
        finally:
            conn.close()
