"""Progress assets: active lessons and their per-question answers, synced by `updatedSince` cursors.

Not partitioned: each table is the current state of every record, materialized whole by every run (see
backfill.py for why, and for backfills of a date range). Their freshness policy: freshness.py."""

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

from dagster import AssetExecutionContext, AssetSpec, MaterializeResult, asset, multi_asset

from pipeline.contract.tables import TABLES, TableSpec
from pipeline.defs.common import lms_key, ready_warehouse, table_definition_metadata
from pipeline.defs.loading import load_stream, sync_client, table_metadata
from pipeline.defs.policy import POOL
from pipeline.defs.progress import answers_ahead
from pipeline.defs.progress.answer_versions import VERSIONS, spill_window_active_lessons
from pipeline.defs.progress.answers_ahead import AnswersAhead, refetch_whole_window, take_answers_plan
from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.progress.clock_skew import clock_skew_metadata
from pipeline.defs.resources import PlatformResource, WarehouseResource
from pipeline.defs.windows import Window
from pipeline.source.decoding import Batch
from pipeline.source.stats import RunStats
from pipeline.warehouse import Load

# Steps run one at a time; among those whose data has arrived, the higher priority first (ready_first.py). The
# answers are fetched from the end of the active lessons' listing (answers_ahead.py) and the snapshots in the
# background from the run's start (pipeline/prefetch): so the progress steps go first once their data is there,
# and the answers commit as early as they can.
CRITICAL_PATH = {"dagster/priority": "1"}


@asset(
    key=lms_key("active_lessons"),
    group_name="progress",
    kinds={"duckdb", "parquet"},
    pool=POOL,
    description=TABLES["active_lessons"].description,
    metadata=table_definition_metadata(TABLES["active_lessons"]),
    op_tags=CRITICAL_PATH,
)
def active_lessons(
    context: AssetExecutionContext,
    platform: PlatformResource,
    warehouse: WarehouseResource,
    backfill: BackfillWindow,
) -> MaterializeResult[Any]:
    """Where every learner stands on every lesson: progress, score, success, time spent."""
    wh = ready_warehouse(warehouse)
    with sync_client(context, platform.settings(), wh) as client:
        # the answers of this run, if it has them, are planned and fetched while these lessons commit
        ahead = AnswersAhead(context, wh, client, backfill.window()) if AnswersAhead.wanted(context) else None
        done = load_stream(
            context,
            wh,
            client,
            "active_lessons",
            lambda window: client.iter_stream("active_lessons", updated_since=window.since),
            backfill=backfill.window(),
            tables=("active_lessons",),
            before_commit=None if ahead is None else ahead.start,
        )
        if ahead is not None:
            ahead.committed(done.result.cursor_after)
    skew = clock_skew_metadata(context, done.stats, platform.settings().lookback)
    return MaterializeResult(metadata={**table_metadata(done, "active_lessons"), **skew})


@multi_asset(
    specs=[
        AssetSpec(
            lms_key("answers"),
            deps=[lms_key("active_lessons")],
            description=TABLES["answers"].description,
            group_name="progress",
            kinds={"duckdb", "parquet"},
            metadata=table_definition_metadata(TABLES["answers"]),
        ),
        AssetSpec(
            lms_key("answer_results"),
            deps=[lms_key("answers")],
            description=TABLES["answer_results"].description,
            group_name="progress",
            kinds={"duckdb", "parquet"},
            metadata=table_definition_metadata(TABLES["answer_results"]),
        ),
    ],
    pool=POOL,
    can_subset=False,
    op_tags=CRITICAL_PATH,
)
def answers(
    context: AssetExecutionContext,
    platform: PlatformResource,
    warehouse: WarehouseResource,
    backfill: BackfillWindow,
) -> Iterator[MaterializeResult[Any]]:
    """Every answer of every attempt (entry and exit quizzes), fetched only for active lessons whose
    version (lastDate) changed since their answers were fetched (answer_versions.py)."""
    wh = ready_warehouse(warehouse)
    planned: dict[str, Any] = {}
    with sync_client(context, platform.settings(), wh) as client, ExitStack() as spills:
        client.hold_decode_workers(False)  # held while fetched beside the steps before (answers_ahead.py)
        ahead = take_answers_plan(context)  # planned and fetching since the active lessons' sweep ended
        if ahead is not None:
            spills.enter_context(ahead.spill)
            planned.update(window=ahead.window, ceiling=ahead.ceiling, lessons=ahead.lessons)

        def fetch(window: Window) -> Iterator[Batch]:
            # the answers cursor never passes the active lessons' it was planned against (windows.py)
            planned["ceiling"] = wh.cursor("active_lessons")
            # on disk until the commit, not in memory: 1M active lessons in a full sync (answer_versions.py)
            lessons = planned["lessons"] = spills.enter_context(
                spill_window_active_lessons(wh, window, only_changed=not refetch_whole_window(window, client))
            )
            return client.iter_answers(lessons.planner_input(), updated_since=window.since)

        def record_versions(load: Load, stats: RunStats) -> None:
            # Only a complete run holds the answers of every planned active lesson: an incomplete one (page
            # drift that did not settle) records nothing, so the next run asks for them again.
            lessons = planned["lessons"]
            planned["counts"] = lessons.counts()
            if stats.complete:
                for versions in lessons.fetched_versions():
                    load.write(VERSIONS, versions)

        def early_tables() -> tuple[TableSpec, ...]:
            # A window of more than OVERLAP_MAX_ROWS active lessons (a large full sync) is committed after its last
            # page, as its fetch starts after the active lessons' commit: inserts beside that fetch would raise the
            # sync's peak memory.
            in_window, _ = planned["lessons"].counts()
            return (TABLES["answers"], TABLES["answer_results"]) if in_window <= answers_ahead.OVERLAP_MAX_ROWS else ()

        done = load_stream(
            context,
            wh,
            client,
            "answers",
            fetch,
            before_commit=record_versions,
            also_tables=[VERSIONS],
            backfill=backfill.window(),
            tables=("answers", "answer_results"),
            cursor_ceiling=lambda: planned["ceiling"],
            early_tables=early_tables,
        )
    in_window, refetched = planned["counts"]
    context.log.info(
        f"answers: {refetched:,} of the window's {in_window:,} active lessons needed their "
        f"answers; {done.stats.planned_requests:,} requests planned"
    )
    yield MaterializeResult(
        asset_key=lms_key("answers"),
        metadata={
            **table_metadata(done, "answers"),
            "planned_requests": done.stats.planned_requests,
            "window_active_lessons": in_window,
            "refetched_active_lessons": refetched,
        },
    )
    yield MaterializeResult(asset_key=lms_key("answer_results"), metadata=table_metadata(done, "answer_results"))
