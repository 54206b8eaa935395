"""What every asset that writes the warehouse shares: its key scheme, owner, pool, and a ready warehouse."""

from collections.abc import Iterable

from dagster import AssetKey

from pipeline.resources import WarehouseResource
from pipeline.source import TABLES
from pipeline.source.tables import TableSpec
from pipeline.warehouse import Warehouse

OWNERS = ["team:data-engineering"]
# DuckDB has one writer: every asset and check that opens the warehouse takes a slot of this pool (limit 1).
POOL = "warehouse"


def lms_key(table: str) -> AssetKey:
    return AssetKey(["lms", table])


def ready_warehouse(warehouse: WarehouseResource, also: Iterable[TableSpec] = ()) -> Warehouse:
    """The warehouse with every raw table (and `also`, e.g. sync-state tables) created (cheap when they exist)."""
    wh = warehouse.warehouse()
    wh.path.parent.mkdir(parents=True, exist_ok=True)
    wh.ensure_tables([*TABLES.values(), *also])
    return wh
