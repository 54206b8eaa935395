"""What holds for every asset and job, in one place: who owns the assets, the pool every step that opens the
warehouse takes, and the run tags jobs that write it carry."""

from __future__ import annotations

from dagster import AssetsDefinition, AssetSpec, Definitions

OWNERS = ["team:data-engineering"]
# DuckDB has one writer: every asset and check that opens the warehouse takes a slot of this pool (limit 1).
POOL = "warehouse"

# Runs tagged this way share one slot (data/dagster_home/dagster.yaml): DuckDB has a single writer. Runs launched
# from an asset's page ("Materialize") run Dagster's implicit asset job, which takes no tags: the `warehouse` pool
# of every writing step is what keeps those to one writer.
WRITES_WAREHOUSE = {"lessonsync/writes-warehouse": "true"}
# Which kind of window the incremental streams read, shown in the UI (the window itself: pipeline/raw/windows.py).
WINDOW_TAG = "lessonsync/window"
CURSOR_WINDOW = {WINDOW_TAG: "cursor"}
BACKFILL_WINDOW = {WINDOW_TAG: "backfill"}
# A run with this tag reads every incremental stream from the beginning (cursors ignored, then moved to now).
FULL_REFRESH_TAG = "lessonsync/full-refresh"


def _owned(spec: AssetSpec) -> AssetSpec:
    return spec.replace_attributes(owners=OWNERS)


def with_policy(defs: Definitions) -> Definitions:
    """`defs` with every asset owned by OWNERS (the domains declare none themselves)."""
    assets = [a.map_asset_specs(_owned) if isinstance(a, AssetsDefinition) else a for a in defs.assets or []]
    return Definitions(
        assets=assets,
        asset_checks=defs.asset_checks,
        jobs=defs.jobs,
        schedules=defs.schedules,
        sensors=defs.sensors,
        resources=defs.resources,
        executor=defs.executor,
        loggers=defs.loggers,
        metadata=defs.metadata,
    )
