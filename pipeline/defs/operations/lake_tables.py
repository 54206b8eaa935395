"""Upkeep of the lake's Iceberg tables: a daily job that repairs damaged tables, compacts small files and expires
old snapshots."""

from typing import Any

from dagster import (
    ConfigurableResource,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
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


def build_lake_maintenance_job(warehouse: ConfigurableResource[Any]) -> JobDefinition:
    """The job with the one resource its op uses: its Launchpad offers that one, not every resource of the code
    location (Definitions binds all of them to a job that does not bring its own)."""

    @job(
        name="lake_maintenance",
        tags=WRITES_WAREHOUSE,
        resource_defs={"warehouse": warehouse},
        description="Compact the lake's Iceberg tables and expire their old snapshots.",
    )
    def lake_maintenance() -> None:
        maintain_lake_tables()

    return lake_maintenance


def build_lake_maintenance_schedule(lake_maintenance: JobDefinition) -> ScheduleDefinition:
    return ScheduleDefinition(
        name="lake_maintenance_schedule",
        job=lake_maintenance,
        cron_schedule="30 4 * * *",
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description="Daily upkeep of the Iceberg tables, after the nightly sync.",
    )
