"""Daily partitions over a record's last update, used only by backfills launched from the UI."""

from __future__ import annotations

import os
import warnings

from dagster import BackfillPolicy, BetaWarning, DailyPartitionsDefinition

# How far back the UI offers partitions; records updated earlier are reached by a full refresh.
PARTITIONS_START = os.environ.get("LESSONSYNC_PARTITIONS_START", "2025-01-01")

updated_daily = DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)

# A 30-day backfill is one run and one sweep of the API (updatedSince = range start), not 30.
one_sweep = BackfillPolicy.single_run()

# Both beta parameters are used on purpose (single-run backfills above; `--select group:...` resolving through
# AssetSelection.groups); Dagster's notice about them opened every `lessonsync` command and `make demo`.
warnings.filterwarnings("ignore", message=r"Parameter `(backfill_policy|include_sources)` .*is currently in beta",
                        category=BetaWarning)
