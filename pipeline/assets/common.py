"""What every asset that writes the warehouse shares: its key scheme, owner, pool, and a ready warehouse."""

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

