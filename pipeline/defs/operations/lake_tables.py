"""Upkeep of the lake's Iceberg tables: a daily job that repairs damaged tables, compacts small files and expires
old snapshots."""

from dagster import (
    DefaultScheduleStatus,
    Failure,
    OpExecutionContext,
    Output,
    ScheduleDefinition,
    job,
    op,
)

from pipeline.analytics import load_project
from pipeline.defs.analytics.assets import mart_relations
from pipeline.defs.policy import POOL, WRITES_WAREHOUSE
from pipeline.defs.resources import WarehouseResource
from pipeline.warehouse import maintain


@op(
    pool=POOL,
    description="Check every Iceberg table and its data files (one damaged or behind is rewritten from the "
    "warehouse), compact those spread over many small files, then expire snapshots older than "
    "LESSONSYNC_ICEBERG_SNAPSHOT_RETENTION (the current snapshot always stays).",
)
def maintain_lake_tables(context: OpExecutionContext, warehouse: WarehouseResource) -> Output[None]:
    store = warehouse.warehouse()
    if store.table_mirror is None:
        context.log.info("LESSONSYNC_TABLE_FORMAT=none: no Iceberg tables to maintain")
        return Output(None)
    settings = warehouse.settings()
    marts = mart_relations(load_project(settings.models_dir))
    try:
        with store.connect() as conn:
            report = maintain(store.table_mirror, conn, settings.iceberg_snapshot_retention, marts)
    finally:
        store.table_mirror.close()
    context.log.info(report.summary())
    if report.failed:
        raise Failure(description=report.summary())
    return Output(
        None,
        metadata={
            "snapshots_expired": sum(report.expired.values()),
            "tables_compacted": len(report.compacted),
            "tables_repaired": len(report.repaired),
        },
    )


@job(tags=WRITES_WAREHOUSE, description="Compact the lake's Iceberg tables and expire their old snapshots.")
def lake_maintenance() -> None:
    maintain_lake_tables()


def build_lake_maintenance_schedule() -> ScheduleDefinition:
    return ScheduleDefinition(
        name="lake_maintenance_schedule",
        job=lake_maintenance,
        cron_schedule="30 4 * * *",
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Daily upkeep of the Iceberg tables, after the nightly sync.",
    )
