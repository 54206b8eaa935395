"""What every asset that writes the warehouse shares: its key scheme, its catalog metadata, a ready warehouse
(owners and pool: policy.py)."""

from typing import Any

from dagster import AssetKey, TableColumn, TableSchema

from pipeline.contract.tables import TableSpec
from pipeline.defs.resources import WarehouseResource
from pipeline.warehouse import Warehouse, table_def

# Asset and check metadata: any value Dagster accepts (its RawMetadataValue union is not public API).
Metadata = dict[str, Any]


def lms_key(table: str) -> AssetKey:
    return AssetKey(["lms", table])


def raw_column_schema(table: TableSpec) -> TableSchema:
    """A raw table's columns as the warehouse holds them (load metadata included), with their DuckDB types and
    the contract's descriptions (pipeline/contract/descriptions.py)."""
    definition = table_def(table)
    described = dict(definition.column_comments)
    return TableSchema(
        columns=[TableColumn(name, type_sql, description=described.get(name)) for name, type_sql in definition.columns]
    )


def table_definition_metadata(table: TableSpec) -> Metadata:
    """What catalogs and lineage tools read from a raw table's asset: its columns, DuckDB types and descriptions
    (from the declaration), where it lives, and its key."""
    return {
        "dagster/column_schema": raw_column_schema(table),
        "dagster/table_name": f"lms.{table.name}",
        "primary_key": ", ".join(table.key),
    }


def ready_warehouse(warehouse: WarehouseResource) -> Warehouse:
    """The warehouse, its directory created; loading.load_stream creates or evolves the tables (every raw
    table and the stream's `also_tables`) on the connection it reads the cursor with."""
    wh = warehouse.warehouse()
    wh.path.parent.mkdir(parents=True, exist_ok=True)
    return wh
