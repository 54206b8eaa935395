"""What every asset that writes the warehouse shares: its key scheme, its catalog metadata, a ready warehouse
(owners and pool: policy.py)."""

from typing import Any

from dagster import AssetKey, DataVersion, TableColumn, TableSchema

from pipeline.contract.tables import TableSpec
from pipeline.defs.resources import WarehouseResource
from pipeline.warehouse import Warehouse, table_def

# Asset and check metadata: any value Dagster accepts (its RawMetadataValue union is not public API).
Metadata = dict[str, Any]


# The event tag Dagster reads a materialization's data version from; a runtime AssetMaterialization has no
# data_version argument, so it carries the tag itself.
DATA_VERSION_TAG = "dagster/data_version"


def lms_key(table: str) -> AssetKey:
    return AssetKey(["lms", table])


def table_data_version(versions: dict[str, int], table: str) -> DataVersion:
    """A raw table's data version: the seq of the newest load that changed its rows (warehouse.content_versions),
    "0" before any did. It stays the same across runs that change nothing (a repeated snapshot, a backfill of
    rows already there), so Dagster does not mark what reads the table stale."""
    return DataVersion(str(versions.get(table, 0)))


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
