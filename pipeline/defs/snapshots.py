"""Snapshot assets, declared as data: each stream is pulled whole (disabled records included) and the
rows that vanished from it are marked deleted, never dropped. The domains declare theirs (directory/assets.py,
catalog/assets.py, sessions/assets.py) and build them with `snapshot_asset`."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dagster import AssetExecutionContext, AssetsDefinition, AssetSpec, MaterializeResult, multi_asset

from pipeline.contract.tables import TABLES
from pipeline.defs.common import lms_key, ready_warehouse, table_definition_metadata
from pipeline.defs.loading import load_stream, sync_client, table_metadata
from pipeline.defs.policy import POOL
from pipeline.defs.resources import PlatformResource, WarehouseResource
from pipeline.defs.windows import SNAPSHOT_WINDOW


@dataclass(frozen=True)
class Snapshot:
    stream: str  # a stream of pipeline.source.STREAMS
    tables: tuple[str, ...]  # tables it fills, all complete after one pull
    group: str
    summary: str  # the one-line business description shown in the UI


def snapshot_asset(snapshot: Snapshot) -> AssetsDefinition:
    specs = [
        AssetSpec(
            lms_key(table),
            description=TABLES[table].description,
            group_name=snapshot.group,
            kinds={"duckdb", "parquet"},
            metadata=table_definition_metadata(TABLES[table]),
        )
        for table in snapshot.tables
    ]

    @multi_asset(name=f"sync_{snapshot.stream}", specs=specs, pool=POOL, can_subset=False, description=snapshot.summary)
    def _sync(
        context: AssetExecutionContext, platform: PlatformResource, warehouse: WarehouseResource
    ) -> Iterator[MaterializeResult[Any]]:
        wh = ready_warehouse(warehouse)
        with sync_client(context, platform.settings(), wh) as client:
            done = load_stream(
                context,
                wh,
                client,
                snapshot.stream,
                lambda _: client.iter_stream(snapshot.stream),
                window=SNAPSHOT_WINDOW,
                snapshot_tables=snapshot.tables,
            )
        for table in snapshot.tables:
            yield MaterializeResult(asset_key=lms_key(table), metadata=table_metadata(done, table))

    return _sync
