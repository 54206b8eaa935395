"""`--select` for in-process runs: a Dagster selection widened to the assets written together. Tables fetched by
one stream (answers with answer_results, groups with users and group_members, ...) are committed together, and
a multi-asset that cannot be subset (can_subset=False) runs whole, so selecting one selects its neighbours, and
the caller says so. A selection that loads raw tables brings their Iceberg mirror (`lake/iceberg_tables`, when
defined) too, as every job that loads them does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dagster import AssetKey, AssetsDefinition, AssetSelection, Definitions

from pipeline.contract.streams import STREAM_TABLES
from pipeline.defs.lake.assets import RAW_MIRROR_KEY


@dataclass(frozen=True)
class WidenedSelection:
    select: list[str]  # selection strings for run_sync: the original ones, plus one per added key
    added: dict[str, list[str]]  # selected key -> the neighbours it brought in (user strings)
    keys: list[AssetKey]  # every asset the widened selection names, sorted
    mirror: str | None = None  # the raw tables' Iceberg mirror, when the selection brought it in (user string)


def widen_to_whole_multi_assets(defs: Definitions, select: Sequence[str]) -> WidenedSelection:
    """`select` plus every asset that must run with a selected one; ValueError when nothing matches."""
    graph = defs.resolve_asset_graph()
    selected = AssetSelection.from_string(" or ".join(f"({s})" for s in select)).resolve(graph)
    if not selected:
        raise ValueError(f"--select {' '.join(select)!r} matches no asset; try 'group:progress' or 'key:lms/answers'")
    added: dict[str, list[str]] = {}
    extra: set[AssetKey] = set()
    for key in sorted(selected):
        if not graph.has(key):
            continue
        missing = sorted(_written_with(key, graph.get(key).assets_def) - selected - extra)
        if missing:
            added[key.to_user_string()] = [k.to_user_string() for k in missing]
            extra.update(missing)
    loads_raw = any(key.path[0] == "lms" for key in selected | extra)
    mirror = RAW_MIRROR_KEY if loads_raw and graph.has(RAW_MIRROR_KEY) and RAW_MIRROR_KEY not in selected else None
    if mirror is not None:
        extra.add(mirror)
    return WidenedSelection(
        [*select, *(f'key:"{k.to_user_string()}"' for k in sorted(extra))],
        added,
        sorted(selected | extra),
        mirror.to_user_string() if mirror is not None else None,
    )


def _written_with(key: AssetKey, assets_def: AssetsDefinition) -> set[AssetKey]:
    """The assets a run of `key` writes as well: its stream's other tables, or its whole unsubsettable multi-asset."""
    if not assets_def.can_subset:
        return set(assets_def.keys)
    for tables in STREAM_TABLES.values():
        keys = {AssetKey(["lms", table]) for table in tables}
        if key in keys:
            return keys & set(assets_def.keys)
    return {key}
