"""Jobs over every domain: the nightly cursor-based sync, a one-click full refresh, checks of the warehouse as
it is. (Backfills: progress/jobs.py; certificate loads: certificates/jobs.py.)"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipeline.defs.operations.runs.retry_policy import retry_policy_executor
from pipeline.defs.policy import CURSOR_WINDOW, FULL_REFRESH_WINDOW, WRITES_WAREHOUSE

SYNC_SELECTION = AssetSelection.all()
NIGHTLY_JOB = "nightly_sync"

nightly_sync_job = define_asset_job(
    NIGHTLY_JOB,
    selection=SYNC_SELECTION,
    description="Everything: incremental streams from their cursors, snapshots whole, certificates, marts, and "
    "their Iceberg mirror.",
    tags={**WRITES_WAREHOUSE, **CURSOR_WINDOW},
    executor_def=retry_policy_executor,
)

full_refresh_job = define_asset_job(
    "full_refresh",
    selection=SYNC_SELECTION,
    description="Re-read every stream from the beginning (cursors ignored, then moved to now).",
    tags={**WRITES_WAREHOUSE, **FULL_REFRESH_WINDOW},
    executor_def=retry_policy_executor,
)

check_warehouse_job = define_asset_job(
    "check_warehouse",
    selection=AssetSelection.all_asset_checks(),
    description="Run every asset check against the warehouse as it is, without syncing anything.",
)
