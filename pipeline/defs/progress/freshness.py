"""How stale the progress tables may get: the nightly run plus slack (Settings.freshness_hours, default 26).
Dagster evaluates the policy itself and shows the assets fresh, warning or failing in the UI."""

from __future__ import annotations

from dagster import AssetSpec, FreshnessPolicy

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.defs.common import lms_key
from pipeline.settings import OrchestrationSettings


def fresh_tables() -> tuple[str, ...]:
    """The tables a nightly run must have refreshed: the own table of every stream with a cursor (incremental or
    planned); a child table follows its parent (one fetch: answer_results, answers), so it needs no policy."""
    return tuple(stream.table for stream in SYNC_STREAMS.values() if stream.kind != "snapshot")


def progress_freshness(settings: OrchestrationSettings) -> FreshnessPolicy:
    return FreshnessPolicy.time_window(fail_window=settings.freshness, warn_window=settings.freshness * 0.9)


def with_progress_freshness(spec: AssetSpec, settings: OrchestrationSettings) -> AssetSpec:
    """`spec` with the progress freshness policy if it is one of fresh_tables(), else unchanged."""
    if spec.key not in {lms_key(table) for table in fresh_tables()}:
        return spec
    return spec.replace_attributes(freshness_policy=progress_freshness(settings))
