"""How stale the progress tables may get: the nightly run plus slack (LESSONSYNC_FRESHNESS_HOURS, default 26).
Dagster evaluates the policy itself and shows the assets fresh, warning or failing in the UI."""

import os
from datetime import timedelta

from dagster import FreshnessPolicy

FAIL_AFTER = timedelta(hours=float(os.environ.get("LESSONSYNC_FRESHNESS_HOURS", "26")))

progress_freshness = FreshnessPolicy.time_window(fail_window=FAIL_AFTER, warn_window=FAIL_AFTER * 0.9)
