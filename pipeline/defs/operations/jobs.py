"""Jobs: the nightly cursor-based sync, a one-click full refresh, backfills, certificate loads, checks."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipeline.assets.certificates import CERTIFICATES_KEY, EVENTS_KEY

# Runs tagged this way share one slot (data/dagster_home/dagster.yaml): DuckDB has a single writer. Runs launched
# from an asset's page ("Materialize") run Dagster's implicit asset job, which takes no tags: the `warehouse` pool
# of every writing step is what keeps those to one writer.
WRITES_WAREHOUSE = {"lessonsync/writes-warehouse": "true"}
# Which kind of window the incremental streams read, shown in the UI (the window itself: pipeline/assets/loading.py).
CURSOR_WINDOW = {"lessonsync/window": "cursor"}
BACKFILL_WINDOW = {"lessonsync/window": "backfill"}

SYNC_SELECTION = AssetSelection.all()
PROGRESS_SELECTION = AssetSelection.groups("progress")
# A certificates load and the models that read only certificate tables (their staging and the certificate marts,
# in the warehouse's `analytics` schema). Models that also read other raw tables (daily_activity reads answers
# too) and the published copy for analysts (it needs every model built) wait for the next sync: before the first
# one their other inputs do not exist, and the run would fail on them.
_CERTIFICATE_TABLES = AssetSelection.assets(EVENTS_KEY, CERTIFICATES_KEY)
_OTHER_RAW_TABLES = AssetSelection.key_prefixes(["lms"]) - _CERTIFICATE_TABLES
CERTIFICATES_SELECTION = _CERTIFICATE_TABLES.downstream() - _OTHER_RAW_TABLES.downstream()

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

backfill_progress_job = define_asset_job(
    "backfill_progress",
    selection=PROGRESS_SELECTION,
    description="Re-read the active lessons and answers updated in a date range, in one run and one sweep: set "
    "resources.backfill.config.updated_from (and updated_to) in the Launchpad. The cursor is left alone.",
    tags={**WRITES_WAREHOUSE, **BACKFILL_WINDOW},
)

load_certificates_job = define_asset_job(
    "load_certificates",
    selection=CERTIFICATES_SELECTION,
    description="Load the webhook inbox's new certificate events, then rebuild the certificate marts in the "
    "warehouse (published copies and daily_activity: next sync).",
    tags=WRITES_WAREHOUSE,
)

check_warehouse_job = define_asset_job(
    "check_warehouse",
    selection=AssetSelection.all_asset_checks(),
    description="Run every asset check against the warehouse as it is, without syncing anything.",
)
