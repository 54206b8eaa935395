"""The progress domain's definitions: the two cursor assets with their freshness policy, the backfill job and
the resource its Launchpad configures."""

from __future__ import annotations

from dagster import Definitions

from pipeline.defs.progress.assets import active_lessons, answers
from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.progress.freshness import with_progress_freshness
from pipeline.defs.progress.jobs import backfill_progress_job
from pipeline.settings import Settings


def build_defs(settings: Settings) -> Definitions:
    fresh = [
        asset.map_asset_specs(lambda spec: with_progress_freshness(spec, settings))
        for asset in (active_lessons, answers)
    ]
    # Unset: cursor runs; set in the Launchpad to backfill a date range.
    return Definitions(assets=fresh, jobs=[backfill_progress_job], resources={"backfill": BackfillWindow()})
