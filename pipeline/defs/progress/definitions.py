"""The progress domain's definitions: the backfill job and the resource its Launchpad configures (the progress
tables themselves are specs of the raw sync, pipeline/defs/raw/assets.py)."""

from __future__ import annotations

from dagster import Definitions

from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.progress.jobs import backfill_progress_job


def build_defs() -> Definitions:
    # Unset: cursor runs; set in the Launchpad to backfill a date range.
    return Definitions(jobs=[backfill_progress_job], resources={"backfill": BackfillWindow()})
