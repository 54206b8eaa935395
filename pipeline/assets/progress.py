"""Progress assets: active lessons and their per-question answers, synced by `updatedSince` cursors."""

from collections.abc import Iterator

import pyarrow as pa
from dagster import AssetExecutionContext, AssetSpec, MaterializeResult, asset, multi_asset

from pipeline.assets.common import OWNERS, POOL, lms_key, ready_warehouse
from pipeline.assets.loading import load_stream, table_metadata
from pipeline.freshness import progress_freshness
from pipeline.partitions import one_sweep, updated_daily
from pipeline.resources import PlatformResource, WarehouseResource
from pipeline.source import TABLES
from pipeline.warehouse import Warehouse
from pipeline.windows import Window

@asset(
    key=lms_key("active_lessons"),
    group_name="progress",
    kinds={"duckdb", "parquet"},
    owners=OWNERS,
    partitions_def=updated_daily,
    backfill_policy=one_sweep,
    pool=POOL,
    description=TABLES["active_lessons"].description,
    freshness_policy=progress_freshness,
)
def active_lessons(
    context: AssetExecutionContext, platform: PlatformResource, warehouse: WarehouseResource
) -> MaterializeResult:
    """Where every learner stands on every lesson: progress, score, success, time spent."""
    wh = ready_warehouse(warehouse)
    with platform.client() as client:
        done = load_stream(context, wh, client, "active_lessons",
                           lambda window: client.iter_stream("active_lessons", updated_since=window.since))
    return MaterializeResult(metadata=table_metadata(done, "active_lessons"))


@multi_asset(
    specs=[
        AssetSpec(lms_key("answers"), deps=[lms_key("active_lessons")], description=TABLES["answers"].description,
                  group_name="progress", kinds={"duckdb", "parquet"}, owners=OWNERS,
                  freshness_policy=progress_freshness),
        AssetSpec(lms_key("answer_results"), deps=[lms_key("answers")],
                  description=TABLES["answer_results"].description, group_name="progress",
                  kinds={"duckdb", "parquet"}, owners=OWNERS),
    ],
    partitions_def=updated_daily,
    backfill_policy=one_sweep,
    pool=POOL,
    can_subset=False,
)
def answers(
    context: AssetExecutionContext, platform: PlatformResource, warehouse: WarehouseResource
) -> Iterator[MaterializeResult]:
    """Every answer of every attempt (entry and exit quizzes), fetched only for lessons that changed."""
    wh = ready_warehouse(warehouse)
    with platform.client() as client:

        def fetch(window: Window):
            return client.iter_answers(changed_active_lessons(wh, window), updated_since=window.since)

        done = load_stream(context, wh, client, "answers", fetch)
    yield MaterializeResult(asset_key=lms_key("answers"), metadata={
        **table_metadata(done, "answers"), "planned_requests": done.stats.planned_requests})
    yield MaterializeResult(asset_key=lms_key("answer_results"), metadata=table_metadata(done, "answer_results"))


def changed_active_lessons(wh: Warehouse, window: Window) -> pa.Table:
    """(user_id, lesson_id) of every active lesson updated in the window, as the warehouse knows them
    right after the active-lessons sweep: the answers client plans its requests from these counts."""
    where, params = ("", []) if window.since is None else ("WHERE last_date >= ?", [window.since])
    with wh.connect(read_only=True) as conn:
        return conn.sql(f"SELECT user_id, lesson_id FROM lms.active_lessons {where}", params=params).to_arrow_table()
