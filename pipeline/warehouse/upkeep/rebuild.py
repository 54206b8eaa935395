"""Rebuilding the warehouse from the lake alone: replay every committed load's manifest in commit order,
with the same rules, load timestamps and table definitions as the original commits, into a new DuckDB
file; each replay must reproduce the counts its manifest recorded. In place, the new file replaces the old
one with an atomic rename while the old one is held open (so no sync can write it meanwhile)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.warehouse.duck.catalog import read_catalog
from pipeline.warehouse.duck.connection import ConnectionSettings, open_connection
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.errors import LakeError, WarehouseError
from pipeline.warehouse.lake.lake import list_manifests, read_manifest
from pipeline.warehouse.lake.lakestore import LakeStore, fsync_dir, open_lake
from pipeline.warehouse.lake.manifest import from_json
from pipeline.warehouse.merge.context import CommitContext, Upsert
from pipeline.warehouse.merge.recovery import replay
from pipeline.warehouse.merge.state import ensure_state_tables
from pipeline.warehouse.merge.upsert import upsert_stage


@dataclass
class RebuildReport:
    target: Path
    loads: int
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows (deleted ones included)
    seconds: float = 0.0
    backup: Path | None = None


def rebuild_into(
    lake_location: LakeStore | Path | str, target: Path, settings: ConnectionSettings, *, upsert: Upsert = upsert_stage
) -> RebuildReport:
    """Build a new warehouse file at `target` (which must not exist) from the lake."""
    started = time.monotonic()
    if target.exists():
        raise WarehouseError(f"{target} already exists; rebuild into a new path, or remove it first.")
    lake = open_lake(lake_location)
    manifests = list_manifests(lake)
    if not manifests:
        raise LakeError(
            f"the lake {lake.location} has no committed loads (no {lake.location}/_loads/*.json): "
            "nothing to rebuild from. Check --data-dir or LESSONSYNC_LAKE_URL."
        )
    partial = target.with_name(target.name + ".rebuilding")
    _remove_database(partial)  # left by an interrupted rebuild
    conn = open_connection(partial, settings, read_only=False)
    try:
        ensure_state_tables(conn)
        ctx = CommitContext(conn, lake, upsert)
        for _, ref in manifests:
            plan, recorded = from_json(read_manifest(lake, ref), ref.where)
            replay(ctx, plan, recorded)
        rows = {
            t.name: conn.execute(f"SELECT count(*) FROM {table_ref(t.name)}").fetchall()[0][0]
            for t in read_catalog(conn)
        }
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    _require_no_wal(partial)
    os.replace(partial, target)
    fsync_dir(target.parent)
    return RebuildReport(target, len(manifests), rows, time.monotonic() - started)


def rebuild_in_place(
    warehouse: Path,
    lake_location: LakeStore | Path | str,
    settings: ConnectionSettings,
    *,
    backup: bool = True,
    upsert: Upsert = upsert_stage,
) -> RebuildReport:
    """Rebuild `warehouse` from the lake and swap it in; keep the old file as <name>.before-rebuild."""
    fresh = warehouse.with_name(warehouse.name + ".rebuilt")
    _remove_database(fresh)
    holder = open_connection(warehouse, settings, read_only=False) if warehouse.exists() else None
    try:
        if holder is not None:
            holder.execute("CHECKPOINT")  # the old file's WAL must not outlive it next to the new file
        report = rebuild_into(lake_location, fresh, settings, upsert=upsert)
    finally:
        if holder is not None:
            holder.close()
    if backup and warehouse.exists():
        report.backup = warehouse.with_name(warehouse.name + ".before-rebuild")
        report.backup.unlink(missing_ok=True)
        os.link(warehouse, report.backup)
    Path(str(warehouse) + ".wal").unlink(missing_ok=True)  # checkpointed above: nothing in it is needed
    os.replace(fresh, warehouse)
    fsync_dir(warehouse.parent)
    report.target = warehouse
    return report


def _remove_database(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(str(path) + ".wal").unlink(missing_ok=True)


def _require_no_wal(path: Path) -> None:
    if Path(str(path) + ".wal").exists():
        raise WarehouseError(
            f"{path}.wal is still there after a checkpoint; the rebuilt file was not swapped in. "
            "Retry the rebuild; if it persists, report it with DuckDB's version."
        )
