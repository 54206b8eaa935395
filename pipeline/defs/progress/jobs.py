"""Backfills of the progress tables: a date range re-read in one run (backfill.py says how)."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipeline.defs.lake.assets import RAW_MIRROR_SELECTION
from pipeline.defs.operations.runs.retry_policy import retry_policy_hook
from pipeline.defs.policy import BACKFILL_WINDOW, WRITES_WAREHOUSE
from pipeline.defs.progress.backfill import RANGE_REQUIRED

PROGRESS_SELECTION = AssetSelection.groups("progress") | RAW_MIRROR_SELECTION  # the tables, then their Iceberg mirror

backfill_progress_job = define_asset_job(
    "backfill_progress",
    selection=PROGRESS_SELECTION,
    description="Re-read the active lessons and answers updated in a date range, in one run and one sweep: set "
    "resources.backfill.config.updated_from (and updated_to) in the Launchpad. The cursor is left alone.",
    config=RANGE_REQUIRED,  # a launch without updated_from is refused: unset, the run would be a cursor run
    tags={**WRITES_WAREHOUSE, **BACKFILL_WINDOW},
    hooks={retry_policy_hook},
)
