"""The LessonSync code location: assembles assets, checks, jobs, schedules, sensors and resources."""

import os
from pathlib import Path

from dagster import Definitions, EnvVar

from pipeline.alerts import failure_alert_sensor
from pipeline.assets.analytics import analytics_assets, analytics_checks
from pipeline.assets.certificates import certificates
from pipeline.assets.checks import raw_table_checks
from pipeline.assets.progress import active_lessons, answers
from pipeline.assets.snapshots import snapshot_assets
from pipeline.backfill import BackfillWindow
from pipeline.jobs import (
    backfill_progress_job, check_warehouse_job, full_refresh_job, load_certificates_job, nightly_sync_job,
)
from pipeline.resources import PlatformResource, WarehouseResource
from pipeline.runs.executor import lessonsync_executor
from pipeline.runs.sensor import dead_run_sensor
from pipeline.schedules import nightly_sync_schedule
from pipeline.sensors import certificate_inbox_sensor
from pipeline.webhooks.resource import InboxResource


def _env(name: str) -> EnvVar | None:
    """EnvVar when set (its value never shows in the UI); otherwise the LESSONSYNC_* settings default."""
    return EnvVar(name) if name in os.environ else None


def build_definitions() -> Definitions:
    """The code location, configured from the LESSONSYNC_* environment as it is now (read, nothing opened)."""
    data_dir = os.environ.get("LESSONSYNC_DATA_DIR", "data")
    return Definitions(
        assets=[active_lessons, answers, *snapshot_assets, certificates, *analytics_assets],
        asset_checks=[*raw_table_checks, *analytics_checks],
        jobs=[nightly_sync_job, full_refresh_job, backfill_progress_job, load_certificates_job, check_warehouse_job],
        schedules=[nightly_sync_schedule],
        sensors=[certificate_inbox_sensor, failure_alert_sensor, dead_run_sensor],
        resources={
            "platform": PlatformResource(base_url=_env("LESSONSYNC_BASE_URL"),
                                         app_secret=_env("LESSONSYNC_APP_SECRET")),
            "warehouse": WarehouseResource(data_dir=data_dir),
            "inbox": InboxResource(path=str(Path(data_dir) / "inbox.sqlite3")),
            "backfill": BackfillWindow(),  # unset: cursor runs; set in the Launchpad to backfill a date range
        },
        # Steps share one process: DuckDB allows one writer, and the client already fetches concurrently.
        # Dagster's in-process executor, plus run-process tags, dead-run recovery and a watched pool wait.
        executor=lessonsync_executor,
    )


defs = build_definitions()
