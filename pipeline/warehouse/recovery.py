"""Keeping the warehouse in step with the lake's manifests.

Commit order (load.py): apply the load inside a DuckDB transaction, write the manifest (the commit point),
then COMMIT DuckDB. A crash between the last two leaves a manifest the warehouse lacks; the next writer
replays it from the lake before doing anything else (roll-forward), so after recovery the warehouse holds
exactly the loads the lake lists. Replays run the same code as live commits and must give the counts the
manifest recorded; anything else means the two have diverged and is reported, never papered over."""

from __future__ import annotations

import logging

import duckdb

from pipeline.warehouse.apply import apply_load
from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.firstload import DEFAULT_SLICE_ROWS, prebuild
from pipeline.warehouse.lake import list_manifests, read_manifest
from pipeline.warehouse.lakestore import LakeStore
from pipeline.warehouse.manifest import LoadOutcome, LoadPlan, from_json
from pipeline.warehouse.state import applied_loads

log = logging.getLogger(__name__)


def recover(conn: duckdb.DuckDBPyConnection, lake: LakeStore, strategy: str,
            slice_rows: int | None = DEFAULT_SLICE_ROWS, memory_limit: str | None = None) -> int:
    """Replay committed loads the warehouse does not have yet; returns how many. The caller has run
    state.ensure_state_tables on this connection."""
    applied = applied_loads(conn)
    newest = max(applied, default=0)
    replayed = 0
    for seq, ref in list_manifests(lake):
        if seq in applied:
            if not ref.name.endswith(f"-{applied[seq]}.json"):
                raise LakeError(f"load {seq} is {applied[seq]} in the warehouse but {ref.name} in the lake: "
                                "they come from different histories. Rebuild with `lessonsync rebuild`.")
            continue
        if seq < newest:
            raise LakeError(f"the lake has load {seq} ({ref.name}) that the warehouse skipped although it has "
                            f"later loads; rebuild with `lessonsync rebuild` to get a consistent warehouse.")
        log.warning("rolling forward load %s from %s (its commit was interrupted)", seq, ref.where)
        plan, recorded = from_json(read_manifest(lake, ref), ref.where)
        replay(conn, plan, recorded, lake, strategy, slice_rows, memory_limit)
        replayed += 1
    return replayed


def replay(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, recorded: LoadOutcome, lake: LakeStore,
           strategy: str, slice_rows: int | None = DEFAULT_SLICE_ROWS, memory_limit: str | None = None) -> None:
    """Apply one manifest's load in its own transaction and check it did what the manifest says (a big
    first load builds its shadow tables first, as a live commit does; `memory_limit`: the connection's)."""
    prebuilt = prebuild(conn, plan, lake, strategy, slice_rows, memory_limit)
    conn.begin()
    try:
        outcome = apply_load(conn, plan, lake, strategy, prebuilt)
        check_same(plan, outcome, recorded)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def check_same(plan: LoadPlan, got: LoadOutcome, recorded: LoadOutcome) -> None:
    if got != recorded:
        raise LakeError(f"replaying load {plan.seq} ({plan.load_id}) gave {_describe(got)} but its manifest "
                        f"recorded {_describe(recorded)}: the warehouse and the lake have diverged. Rebuild "
                        "from the lake with `lessonsync rebuild`.")


def _describe(outcome: LoadOutcome) -> str:
    tables = {name: stats.as_dict() for name, stats in outcome.tables.items()}
    return f"cursor {outcome.cursor_before} -> {outcome.cursor_after}, tables {tables}"
