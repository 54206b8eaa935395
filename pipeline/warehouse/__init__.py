"""The DuckDB warehouse and its Parquet lake. See docs/warehouse.md.

wh = Warehouse(path=Path("data/warehouse.duckdb"), lake_dir=Path("data/lake"))
wh.ensure_tables(specs)
with wh.load(stream="answers", run_id=run_id, started_at=started) as load:
    for spec, batch in batches:
        load.write(spec, batch)
    result = load.commit(cursor=new_cursor, complete_snapshots=set())

This module is the warehouse's only entrance: code outside `pipeline.warehouse` imports from here, never from
its sub-packages (the import contract `warehouse-facade` in pyproject.toml checks it). Inside, each layer
imports only the ones below it (contract `warehouse-layers`):

  upkeep/    operators' tools over a whole warehouse: rebuild from the lake, cursor reset, stream status
  warehouse  the Warehouse class: one DuckDB file, its lake and its Iceberg mirror
  loading/   one load: batches checked and written to the lake, then committed (early insert, child links)
  merge/     one load's parts merged into DuckDB: staging, upsert, deletions, repeats, sync state, recovery,
             and the key and link checks over what the loads wrote
  lake/      the Parquet lake: parts, manifests, where the bytes live, the Iceberg mirror
  duck/      DuckDB itself: connections, table definitions and their catalog, Arrow types
errors, results and hooks sit beside them, used by all. Heavy optional dependencies (pyiceberg, s3fs) are
imported only where they are used, so importing this module does not load them.
"""

from pipeline.warehouse.duck.arrow_types import field_type
from pipeline.warehouse.duck.catalog import catalog_unchanged, read_table_def
from pipeline.warehouse.duck.connection import STORAGE_COMPATIBILITY_VERSION, insertion_order_not_kept, scalar
from pipeline.warehouse.duck.schema import keeps_deleted_rows, table_def
from pipeline.warehouse.duck.tabledef import SCHEMA
from pipeline.warehouse.errors import (
    LakeError,
    SchemaError,
    WarehouseError,
    WarehouseLockedError,
    WarehouseMissingError,
)
from pipeline.warehouse.hooks import on_point, reached
from pipeline.warehouse.lake.first_load_files import discard as discard_first_load_files
from pipeline.warehouse.lake.iceberg import (
    CatalogUnavailable,
    MaintenanceReport,
    MirrorStats,
    TableFormatError,
    maintain,
    table_summaries,
)
from pipeline.warehouse.lake.lake import check_parts
from pipeline.warehouse.loading.early_insert import EARLY_PART_ROWS, EarlyFirstLoad
from pipeline.warehouse.loading.links import ChildOf
from pipeline.warehouse.loading.load import Load
from pipeline.warehouse.merge.checks import (
    duplicate_keys,
    duplicated_values,
    last_load_counts,
    null_keys,
    orphans,
    row_count,
)
from pipeline.warehouse.merge.seen import (
    content_version_ids,
    content_versions,
    is_committed_load,
    last_seen_sql,
    snapshot_seen,
)
from pipeline.warehouse.merge.state import read_discovered as discovered_columns
from pipeline.warehouse.merge.state import tables_changed_by_run
from pipeline.warehouse.results import LoadResult, TableLoadStats
from pipeline.warehouse.upkeep.rebuild import RebuildReport, rebuild_in_place, rebuild_into
from pipeline.warehouse.upkeep.reset import reset_cursor
from pipeline.warehouse.upkeep.status import StreamStatus, TableRows, live_table_rows, stream_statuses
from pipeline.warehouse.warehouse import Warehouse

__all__ = [
    "EARLY_PART_ROWS",
    "SCHEMA",
    "STORAGE_COMPATIBILITY_VERSION",
    "CatalogUnavailable",
    "discard_first_load_files",
    "ChildOf",
    "EarlyFirstLoad",
    "LakeError",
    "Load",
    "LoadResult",
    "MaintenanceReport",
    "MirrorStats",
    "RebuildReport",
    "SchemaError",
    "StreamStatus",
    "TableFormatError",
    "TableLoadStats",
    "TableRows",
    "Warehouse",
    "WarehouseError",
    "WarehouseLockedError",
    "WarehouseMissingError",
    "catalog_unchanged",
    "check_parts",
    "content_version_ids",
    "content_versions",
    "discovered_columns",
    "duplicate_keys",
    "duplicated_values",
    "field_type",
    "insertion_order_not_kept",
    "is_committed_load",
    "keeps_deleted_rows",
    "last_load_counts",
    "last_seen_sql",
    "live_table_rows",
    "maintain",
    "null_keys",
    "on_point",
    "orphans",
    "reached",
    "read_table_def",
    "rebuild_in_place",
    "rebuild_into",
    "reset_cursor",
    "row_count",
    "scalar",
    "snapshot_seen",
    "stream_statuses",
    "table_def",
    "table_summaries",
    "tables_changed_by_run",
]
