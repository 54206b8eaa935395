"""Which models the run after the loads builds: those `build_models` would not find unchanged (analytics/build.py)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import duckdb

from pipeline.analytics import load_project, models_to_build
from pipeline.settings import Settings, parse_as_of
from pipeline.warehouse import Warehouse, WarehouseError

log = logging.getLogger("lessonsync.sync")


def models_to_run(settings: Settings) -> list[str] | None:
    """The models whose inputs changed since their last build, or whose tests read something that changed, read
    from the warehouse without writing it, with the `as_of` a build would take now; None when that cannot be told
    (the warehouse unreadable, an invalid as_of): then every model runs, and its build says what is wrong."""
    try:
        as_of = parse_as_of(settings.analytics_as_of) if settings.analytics_as_of else datetime.now(UTC)
        project = load_project(settings.models_dir)
        with Warehouse.from_settings(settings).connect(read_only=True) as conn:
            return models_to_build(conn, project, as_of)
    except (OSError, ValueError, duckdb.Error, WarehouseError) as error:
        log.info("which models changed could not be told (%s): every model runs", error)
        return None
