"""Keeping the warehouse in step with the lake's manifests.

Commit order (loading/load.py): apply the load inside a DuckDB transaction, write the manifest (the commit point),
then COMMIT DuckDB. A crash between the last two leaves a manifest the warehouse lacks; the next writer
replays it from the lake before doing anything else (roll-forward), so after recovery the warehouse holds
exactly the loads the lake lists. Replays run the same code as live commits and must give the counts the
manifest recorded; anything else means the two have diverged and is reported, never papered over."""

from __future__ import annotations

import logging
from dataclasses import replace

from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.lake.lake import list_manifests, read_manifest
from pipeline.warehouse.lake.manifest import LoadOutcome, LoadPlan, from_json
from pipeline.warehouse.merge.apply import apply_load
from pipeline.warehouse.merge.context import CommitContext
from pipeline.warehouse.merge.state import applied_loads

log = logging.getLogger(__name__)


def recover(ctx: CommitContext) -> int:
    """Replay committed loads the warehouse does not have yet; returns how many. The caller has run
    state.ensure_state_tables on this connection."""
    applied = applied_loads(ctx.conn)
    newest = max(applied, default=0)
    replayed = 0
    for seq, ref in list_manifests(ctx.lake):
        if seq in applied:
            if not ref.name.endswith(f"-{applied[seq]}.json"):
                raise LakeError(
                    f"load {seq} is {applied[seq]} in the warehouse but {ref.name} in the lake: "
                    "they come from different histories. Rebuild with `lessonsync rebuild`."
                )
            continue
        if seq < newest:
            raise LakeError(
                f"the lake has load {seq} ({ref.name}) that the warehouse skipped although it has "
                f"later loads; rebuild with `lessonsync rebuild` to get a consistent warehouse."
            )
        log.warning("rolling forward load %s from %s (its commit was interrupted)", seq, ref.where)
        plan, recorded = from_json(read_manifest(ctx.lake, ref), ref.where)
        replay(ctx, plan, recorded)
        replayed += 1
    return replayed


def replay(ctx: CommitContext, plan: LoadPlan, recorded: LoadOutcome) -> None:
    """Apply one manifest's load in its own transaction and check it did what the manifest says."""
    ctx.conn.begin()
    try:
        outcome = apply_load(ctx, plan)
        check_same(plan, outcome, recorded)
    except BaseException:
        ctx.conn.rollback()
        raise
    ctx.conn.commit()


def check_same(plan: LoadPlan, got: LoadOutcome, recorded: LoadOutcome) -> None:
    """The replay did what the manifest says; whether it took the repeats.py shortcut or not does not count:
    either way gives the same rows."""
    if replace(got, repeat_of=None) != replace(recorded, repeat_of=None):
        raise LakeError(
            f"replaying load {plan.seq} ({plan.load_id}) gave {_describe(got)} but its manifest "
            f"recorded {_describe(recorded)}: the warehouse and the lake have diverged. Rebuild "
            "from the lake with `lessonsync rebuild`."
        )


def _describe(outcome: LoadOutcome) -> str:
    tables = {name: stats.as_dict() for name, stats in outcome.tables.items()}
    return f"cursor {outcome.cursor_before} -> {outcome.cursor_after}, tables {tables}"
