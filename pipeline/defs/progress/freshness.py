"""How stale the progress tables may get: the nightly run plus slack (LESSONSYNC_FRESHNESS_HOURS, default 26).
Dagster evaluates the policy itself and shows the assets fresh, warning or failing in the UI."""

from dagster import FreshnessPolicy

from pipeline.settings import load_settings

FAIL_AFTER = load_settings().freshness

progress_freshness = FreshnessPolicy.time_window(fail_window=FAIL_AFTER, warn_window=FAIL_AFTER * 0.9)
