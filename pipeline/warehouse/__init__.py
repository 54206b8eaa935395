"""The DuckDB warehouse and its Parquet lake See docs/warehouse.md.

wh = Warehouse(path=Path("data/warehouse.duckdb"), lake_dir=Path("data/lake"))
wh.ensure_tables(specs)
with wh.load(stream="answers", run_id=run_id, started_at=started) as load:
    for spec, batch in batches:
        load.write(spec, batch)
    result = load.commit(cursor=new_cursor, complete_snapshots=set())
"""

from pipeline.warehouse.checks import duplicate_keys, null_keys, orphans, row_count
from pipeline.warehouse.errors import (
    LakeError,
    SchemaError,
    WarehouseError,
    WarehouseLockedError,
    WarehouseMissingError,
)
from pipeline.warehouse.links import ChildOf
from pipeline.warehouse.load import Load
from pipeline.warehouse.results import LoadResult, TableLoadStats
from pipeline.warehouse.warehouse import Warehouse

__all__ = [
    "ChildOf",
    "LakeError",
    "Load",
    "LoadResult",
    "SchemaError",
    "TableLoadStats",
    "Warehouse",
    "WarehouseError",
    "WarehouseLockedError",
    "WarehouseMissingError",
    "duplicate_keys",
    "null_keys",
    "orphans",
    "row_count",
]
