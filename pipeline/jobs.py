"""Jobs: the nightly cursor-based sync and a one-click full refresh."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

# Runs tagged this way share one slot (data/dagster_home/dagster.yaml): DuckDB has a single writer.
WRITES_WAREHOUSE = {"lessonsync/writes-warehouse": "true"}
# Cursor runs read from the stored cursor; runs without this tag read their partition range (backfills).
CURSOR_WINDOW = {"lessonsync/window": "cursor"}

SYNC_SELECTION = AssetSelection.all()

nightly_sync_job = define_asset_job(
    "nightly_sync",
    selection=SYNC_SELECTION,
    description="Everything: incremental streams from their cursors, snapshots whole, certificates, marts.",
    tags={**WRITES_WAREHOUSE, **CURSOR_WINDOW},
)

full_refresh_job = define_asset_job(
    "full_refresh",
    selection=SYNC_SELECTION,
    description="Re-read every stream from the beginning (cursors ignored, then moved to now).",
    tags={**WRITES_WAREHOUSE, **CURSOR_WINDOW, "lessonsync/full-refresh": "true"},
)

check_warehouse_job = define_asset_job(
    "check_warehouse",
    selection=AssetSelection.all_asset_checks(),
    description="Run every asset check against the warehouse as it is, without syncing anything.",
)
