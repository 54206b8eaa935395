"""`lms_raw`: every raw table of the platform as ONE subsettable multi-asset (the way `@dlt_assets` and
`@sling_assets` model a connector). Its one step runs the Dagster-free runner (pipeline/raw/runner.py) over the
streams of the selected tables, and yields each table's materialization and checks as its stream commits.

The incremental tables (progress) are not partitioned: each is the current state of every record, materialized
whole by every run; a backfill is the same asset with the `backfill` resource configured
(pipeline/defs/progress/backfill.py). The snapshot tables are pulled whole and their vanished rows marked deleted."""

from collections.abc import Iterable, Iterator
from contextlib import closing
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    multi_asset,
)

from pipeline.contract.streams import STREAM_TABLES, SYNC_STREAMS, planned_from, stream_tables
from pipeline.contract.tables import TABLES
from pipeline.defs.common import (
    DATA_VERSION_TAG,
    lms_key,
    ready_warehouse,
    table_data_version,
    table_definition_metadata,
)
from pipeline.defs.policy import BACKFILL_WINDOW, POOL, WINDOW_TAG, is_full_refresh
from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.progress.clock_skew import clock_skew_metadata
from pipeline.defs.progress.freshness import with_progress_freshness
from pipeline.defs.raw.checking import ChecksBeside, StreamChecks
from pipeline.defs.raw.checks import (
    BLOCKING_CHECK,
    CheckRules,
    raw_check_results,
    selected_checks,
    skipped_tables,
    table_check_specs,
)
from pipeline.defs.raw.metadata import contract_facts, table_metadata
from pipeline.defs.resources import PlatformResource, WarehouseResource
from pipeline.raw.commit import StreamLoad
from pipeline.raw.runner import RawRun, RawSync, streams_of
from pipeline.settings import Settings
from pipeline.warehouse import Warehouse, catalog_unchanged


def raw_table_specs(settings: Settings) -> list[AssetSpec]:
    """Every declared stream's tables, in its group, with its declared deps (pipeline/contract/declarations.py)."""
    return [
        with_progress_freshness(
            AssetSpec(
                lms_key(table),
                deps=[lms_key(dep) for dep in stream.deps.get(table, ())],
                description=TABLES[table].description,
                group_name=stream.group,
                kinds={"duckdb", "parquet"},
                metadata=table_definition_metadata(TABLES[table]),
            ),
            settings.orchestration,
        )
        for stream in SYNC_STREAMS.values()
        for table in stream.table_names
    ]


def build_raw_sync(settings: Settings, rules: CheckRules) -> AssetsDefinition:
    """The `lms_raw` multi-asset with every raw table's spec and checks, from the streams declared now."""
    raw_tables = stream_tables()

    @multi_asset(
        name="lms_raw",
        specs=raw_table_specs(settings),
        check_specs=[spec for table in raw_tables for spec in table_check_specs(table, rules)],
        can_subset=True,
        pool=POOL,
        description="Every raw table of the platform's API, in one step: the selected tables' streams fetched at "
        "once through one client, each committed (load and cursor in one DuckDB transaction) as its fetch ends, "
        "its materialization and checks reported then.",
    )
    def lms_raw(
        context: AssetExecutionContext,
        platform: PlatformResource,
        warehouse: WarehouseResource,
        backfill: BackfillWindow,
    ) -> Iterator[MaterializeResult[Any] | AssetMaterialization | AssetCheckResult]:
        wh = ready_warehouse(warehouse)
        selected_tables = {key.path[-1] for key in context.selected_asset_keys}
        checks = selected_checks(context.selected_asset_check_keys)
        if not selected_tables:  # checks only (the check_warehouse job): the warehouse as it is
            yield from _checks(wh, raw_tables, checks, rules, context.run.run_id, {})
            return
        run = RawRun(
            context.run.run_id,
            full_refresh=is_full_refresh(context.run.tags),
            backfill=backfill.window(backfill_run=context.run.tags.get(WINDOW_TAG) == BACKFILL_WINDOW[WINDOW_TAG]),
        )
        settings = platform.settings()
        sync = RawSync(wh, settings, context.log, run)
        streams = streams_of(selected_tables)
        skipped: list[str] = []  # tables whose checks were not evaluated again (unchanged by this run)

        def checked(evaluated: Iterable[StreamChecks]) -> Iterator[AssetCheckResult]:
            for evaluation in evaluated:
                yield from evaluation.results
                skipped.extend(skipped_tables(checks, evaluation.tables, evaluation.results))

        # Closed however this step ends (an error here while the runner waits at a commit, e.g. a full disk under
        # the event log): its fetches, client and background mirror are stopped, never left to hold the process.
        beside = ChecksBeside(wh, checks, rules, context.run.run_id, sync.mirror_paused)
        with closing(beside), closing(sync.run(streams)) as commits:
            for done in commits:
                yield from _reported(context, done, selected_tables, settings)
                tables = STREAM_TABLES[done.stream]
                evaluating = beside.submit(
                    done.stream, tables, {table: contract_facts(done, table) for table in tables}
                )
                # a blocking check that fails drops what the run plans from the stream, before it commits
                children = [child for child in planned_from(done.stream) if child.name in streams]
                if evaluating is not None and children:
                    blocked = _blocked(evaluating.result().results)
                    for child in children if blocked else ():
                        sync.drop(child.name, f"the blocking check {BLOCKING_CHECK} of lms/{blocked[0]} failed")
                yield from checked(beside.ready())
            yield from checked(beside.rest())
        if skipped:
            context.log.info(
                f"checks not evaluated again (Dagster shows them skipped; their last evaluation stands): "
                f"{', '.join(f'lms/{t}' for t in skipped)}, of which this run changed no row, nor of what they link "
                f"to, and met nothing new in their contract; their {BLOCKING_CHECK} passes on that ground"
            )

    return lms_raw


def _reported(
    context: AssetExecutionContext, done: StreamLoad, selected: set[str], settings: Settings
) -> Iterator[MaterializeResult[Any] | AssetMaterialization]:
    """One result per selected table of the stream; a table written with them but not selected (its stream fills
    several) is reported as a runtime materialization, so the UI shows every table the commit changed. Each
    carries the table's data version: a load that changed nothing leaves what reads the table up to date."""
    stream = SYNC_STREAMS[done.stream]
    for table in stream.table_names:
        metadata = table_metadata(done, table)
        if stream.kind == "incremental" and table == stream.table:  # the listing of lastDates, by updatedSince
            metadata.update(clock_skew_metadata(context, done.stats, settings.lookback))
        version = table_data_version(done.versions, table)
        if table in selected:
            yield MaterializeResult(asset_key=lms_key(table), metadata=metadata, data_version=version)
        else:
            yield AssetMaterialization(
                asset_key=AssetKey(lms_key(table).path), metadata=metadata, tags={DATA_VERSION_TAG: version.value}
            )


def _checks(
    wh: Warehouse,
    tables: list[str] | tuple[str, ...],
    checks: dict[str, set[str]],
    rules: CheckRules,
    run_id: str,
    loaded: dict[str, dict[str, object]],
) -> Iterator[AssetCheckResult]:
    if not any(table in checks for table in tables):
        return
    with wh.connect(read_only=True) as conn, catalog_unchanged(conn):
        yield from raw_check_results(conn, tables, checks, rules, run_id, loaded)


def _blocked(results: list[AssetCheckResult]) -> list[str]:
    """The tables whose blocking check failed."""
    return [
        r.asset_key.path[-1]
        for r in results
        if r.check_name == BLOCKING_CHECK
        and not r.passed
        and r.severity == AssetCheckSeverity.ERROR
        and r.asset_key is not None
    ]
