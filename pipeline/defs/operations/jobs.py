"""Jobs over every domain: the nightly cursor-based sync, a one-click full refresh, checks of the warehouse as
it is. (Backfills: progress/jobs.py; certificate loads: certificates/jobs.py.)"""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipeline.defs.operations.runs.retry_policy import retry_policy_hook
from pipeline.defs.policy import CURSOR_WINDOW, FULL_REFRESH_TAG, WRITES_WAREHOUSE

SYNC_SELECTION = AssetSelection.all()

nightly_sync_job = define_asset_job(
    "nightly_sync",
    selection=SYNC_SELECTION,
    description="Everything: incremental streams from their cursors, snapshots whole, certificates, marts, and "
    "their Iceberg mirror.",
    tags={**WRITES_WAREHOUSE, **CURSOR_WINDOW},
    hooks={retry_policy_hook},
)

full_refresh_job = define_asset_job(
    "full_refresh",
    selection=SYNC_SELECTION,
    description="Re-read every stream from the beginning (cursors ignored, then moved to now).",
    tags={**WRITES_WAREHOUSE, **CURSOR_WINDOW, FULL_REFRESH_TAG: "true"},
    hooks={retry_policy_hook},
)

check_warehouse_job = define_asset_job(
    "check_warehouse",
    selection=AssetSelection.all_asset_checks(),
    description="Run every asset check against the warehouse as it is, without syncing anything.",
)
