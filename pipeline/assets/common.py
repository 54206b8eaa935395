"""What every asset that writes the warehouse shares: its key scheme, owner, pool, and a ready warehouse."""

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb
from dagster import AssetKey

from pipeline.resources import WarehouseResource
from pipeline.warehouse import Warehouse

OWNERS = ["team:data-engineering"]
# DuckDB has one writer: every asset and check that opens the warehouse takes a slot of this pool (limit 1).
POOL = "warehouse"


def lms_key(table: str) -> AssetKey:
    return AssetKey(["lms", table])


def ready_warehouse(warehouse: WarehouseResource) -> Warehouse:
    """The warehouse, its directory created; loading.load_stream creates or evolves the tables (every raw
    table and the stream's `also_tables`) on the connection it reads the cursor with."""
    wh = warehouse.warehouse()
    wh.path.parent.mkdir(parents=True, exist_ok=True)
    return wh


@contextmanager
def one_connection(wh: Warehouse) -> Iterator[duckdb.DuckDBPyConnection]:
    """Within the block every wh.connect() (read-only or not) yields ONE read-write connection, opened at
    the start and closed at the end: a step's consecutive look-ups (tables, cursor, window plan) open the
    file once instead of once each (~50 ms per open at scale large). Hold it only around DuckDB work, never
    around a fetch: the file stays locked for as long as the block runs. A read-only request getting the
    read-write connection is what connection._connect does anyway when this process writes the file."""
    with wh.connect(read_only=False) as conn:

        @contextmanager
        def shared(read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
            yield conn

        wh.connect = shared  # type: ignore[method-assign]  # this instance only, for the block
        try:
            yield conn
        finally:
            del wh.connect  # the class's method again
