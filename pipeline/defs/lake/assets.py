"""The Iceberg mirror as two assets of their own (group `lake`), downstream of what they mirror:

- `lake/iceberg_tables`: every raw table (`lms/*`, the certificate tables too) brought up to the warehouse after
  the raw commits of the run, in every job that loads raw tables;
- `lake/iceberg_marts`: every published mart, after `analytics/published`.

They are the bulkhead between the warehouse and its Iceberg copy: a load is committed before either runs, and
either failing fails only itself, with the warehouse whole. The next run of the step rolls every table forward
and heals what it finds damaged (pipeline/warehouse/lake/iceberg.py; docs/lake-tables.md). Defined only when
LESSONSYNC_TABLE_FORMAT=iceberg."""

# No `from __future__ import annotations`: Dagster reads the resource annotations at runtime.

import time
from collections.abc import Callable, Sequence
from typing import Any

import duckdb
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from pipeline.analytics import MODEL_SCHEMA, load_project
from pipeline.defs.analytics.assets import mart_relations
from pipeline.defs.policy import POOL
from pipeline.defs.resources import WarehouseResource
from pipeline.raw.mirror import BackgroundMirror, await_background_mirror
from pipeline.warehouse import CatalogUnavailable, MirrorStats

GROUP = "lake"
RAW_MIRROR_KEY = AssetKey([GROUP, "iceberg_tables"])
MART_MIRROR_KEY = AssetKey([GROUP, "iceberg_marts"])
# The raw tables' mirror, for the jobs that load raw tables; by prefix, so it selects nothing (and resolves) when
# the mirror is off and the asset not defined.
RAW_MIRROR_SELECTION = AssetSelection.key_prefixes(list(RAW_MIRROR_KEY.path))


def build_lake_mirror(raw_keys: Sequence[AssetKey], published_key: AssetKey) -> list[AssetsDefinition]:
    """The two mirror assets: the raw one downstream of `raw_keys`, the marts' of `published_key`."""

    @asset(
        key=RAW_MIRROR_KEY,
        deps=list(raw_keys),
        group_name=GROUP,
        kinds={"iceberg"},
        pool=POOL,
        description="Every raw table as an Apache Iceberg table under `<lake>/iceberg/lms`, brought up to the "
        "warehouse after the raw commits: only the tables a load changed are opened; a damaged table or catalog is "
        "rebuilt from the warehouse. Its failure fails only this step: the loads stay committed.",
    )
    def iceberg_tables(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult[Any]:
        return _mirrored(context, warehouse, RAW_MIRROR_KEY, lambda mirror, conn: mirror.sync_behind(conn))

    @asset(
        key=MART_MIRROR_KEY,
        deps=[published_key],
        group_name=GROUP,
        kinds={"iceberg"},
        pool=POOL,
        description="Every published mart as an Apache Iceberg table under `<lake>/iceberg/analytics`, written "
        "whole when its rows changed. Its failure fails only this step: the published copy stays.",
    )
    def iceberg_marts(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult[Any]:
        marts = mart_relations(load_project(warehouse.settings().models_dir))
        return _mirrored(
            context, warehouse, MART_MIRROR_KEY, lambda mirror, conn: mirror.sync_marts(conn, _built(conn, marts))
        )

    return [iceberg_tables, iceberg_marts]


def _built(conn: duckdb.DuckDBPyConnection, marts: dict[str, str]) -> dict[str, str]:
    """The marts the warehouse holds: one never built (its first build failed) is not published, nor mirrored."""
    names = [
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
            "AND table_schema = ?",
            [MODEL_SCHEMA],
        ).fetchall()
    ]
    return {name: relation for name, relation in marts.items() if name in names}


def _mirrored(
    context: AssetExecutionContext,
    warehouse: WarehouseResource,
    key: AssetKey,
    sync: Callable[[Any, duckdb.DuckDBPyConnection], list[MirrorStats]],
) -> MaterializeResult[Any]:
    """Run `sync` on the warehouse's write connection; its result as metadata, or a Failure naming the step. The
    raw tables' step first waits for the background mirror of the raw step (pipeline/raw/mirror.py), which has
    brought up what it could: the step finds those tables current, and does the rest."""
    step = key.to_user_string()
    background = await_background_mirror(warehouse.path, collect=True) if key == RAW_MIRROR_KEY else None
    if background is not None:
        for table, why in background.failed.items():
            context.log.warning(f"{step}: the background mirror left {table} behind ({why}); brought up now")
    store = warehouse.warehouse()
    mirror = store.table_mirror
    if mirror is None:
        raise Failure(description=f"{step}: LESSONSYNC_TABLE_FORMAT=none for this run: no Iceberg tables are kept")
    started = time.perf_counter()
    try:
        with store.connect() as conn:
            stats = sync(mirror, conn)
    except CatalogUnavailable as error:  # no table could be written; the warehouse holds every load
        raise Failure(description=f"{step}: {error}; the warehouse holds every load, the next run mirrors it") from None
    finally:
        mirror.close()
    for stat in stats:
        if stat.repaired:
            context.log.warning(f"{step}: {stat.table} rebuilt from the warehouse: {stat.repaired}")
    metadata = {**_metadata(stats, time.perf_counter() - started), **_background_metadata(background)}
    failed = [stat.error for stat in stats if stat.error]
    if failed:
        raise Failure(
            description=f"{step}: {len(failed)} of {len(stats)} Iceberg tables not brought up to the warehouse, which "
            f"holds every load (the next run tries again): {' | '.join(failed)}",
            metadata=metadata,
        )
    written = [stat.table for stat in stats if stat.wrote]
    context.log.info(f"{step}: {len(stats)} tables checked, {len(written)} written: {', '.join(written) or '-'}")
    return MaterializeResult(metadata=metadata)


def _background_metadata(background: BackgroundMirror | None) -> dict[str, Any]:
    """What the raw step's background mirror wrote (while the streams fetched, and after the last commit)."""
    if background is None:
        return {}
    return {
        "background_tables_written": MetadataValue.json(sorted(background.written)),
        "background_failed": MetadataValue.json(background.failed),
        "background_seconds": round(background.seconds, 3),
        "background_finished_at": MetadataValue.timestamp(background.finished_at),
    }


def _metadata(stats: list[MirrorStats], seconds: float) -> dict[str, Any]:
    return {
        "tables_checked": len(stats),
        "tables_written": MetadataValue.json(sorted(stat.table for stat in stats if stat.wrote)),
        "tables_rewritten": sum(stat.rewritten for stat in stats),
        "rows_written": sum(stat.rows_written for stat in stats),
        "repaired": MetadataValue.json({stat.table: stat.repaired for stat in stats if stat.repaired}),
        "failed": MetadataValue.json({stat.table: stat.error for stat in stats if stat.error}),
        "seconds": round(seconds, 3),
    }
