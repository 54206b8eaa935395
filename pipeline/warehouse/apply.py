"""One load applied to the warehouse inside the caller's transaction. The same function serves a live
commit, the roll-forward of a load whose manifest was written just before a crash, and a rebuild from
the lake, so all three produce the same rows, load timestamps, cursor and counts."""

from __future__ import annotations

from dataclasses import replace

import duckdb

from pipeline.warehouse.arrow_types import q, ts_literal
from pipeline.warehouse.context import CommitContext
from pipeline.warehouse.deletions import mark_vanished, replace_children
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.lake import check_parts
from pipeline.warehouse.manifest import LoadOutcome, LoadPlan, TableLoad
from pipeline.warehouse.results import TableLoadStats
from pipeline.warehouse.schema import TableDef, ensure_tables, table_ref
from pipeline.warehouse.staging import Stage, count_changes, create_stage, drop_stage, mark_stale_children
from pipeline.warehouse.state import advance_cursor, record_load


def apply_load(ctx: CommitContext, plan: LoadPlan) -> LoadOutcome:
    """Needs the internal tables (state.ensure_state_tables) to exist already."""
    conn = ctx.conn
    catalog = ensure_tables(conn, plan.catalog)  # replays: the tables as they were at that commit
    stats, stages = _stage_tables(ctx, plan, catalog)
    for link in plan.children:
        if link.child in stages and link.parent in stages:
            mark_stale_children(conn, stages[link.child], stages[link.parent], link)
    for name, stage in stages.items():
        counts = count_changes(conn, stage)
        ctx.upsert(conn, stage, ts_literal(plan.loaded_at))
        stats[name] = TableLoadStats(
            fetched=sum(p.rows for p in stage.load.parts), inserted=counts["insert"],
            updated=counts["update"] + counts["rewrite"], unchanged=counts["same"], stale=counts["stale"])
    for name, count in _mark_deleted(conn, plan, catalog, stages).items():
        stats[name] = replace(stats.get(name, TableLoadStats()), deleted=count)
    for stage in stages.values():
        drop_stage(conn, stage)
    before, after = advance_cursor(conn, plan)
    outcome = LoadOutcome(before, after, stats)
    record_load(conn, plan, outcome)
    return outcome


def _stage_tables(ctx: CommitContext, plan: LoadPlan, catalog: dict[str, TableDef]
                  ) -> tuple[dict[str, TableLoadStats], dict[str, Stage]]:
    """Append tables are inserted at once; the others are staged (deduped and classified) for upsert."""
    stats: dict[str, TableLoadStats] = {}
    stages: dict[str, Stage] = {}
    for load in parents_first(plan.tables):
        target = _target(catalog, load.name)
        files = check_parts(ctx.lake, load.parts, f"load {plan.seq} ({plan.load_id})", ctx.conn)
        if load.kind == "append":
            fetched = sum(part.rows for part in load.parts)
            stats[load.name] = TableLoadStats(fetched=fetched, inserted=_append(ctx.conn, load, target, files, plan))
        elif files:
            stages[load.name] = create_stage(ctx.conn, load, target, files)
        else:
            stats[load.name] = TableLoadStats()
    return stats, stages


def _mark_deleted(conn: duckdb.DuckDBPyConnection, plan: LoadPlan, catalog: dict[str, TableDef],
                  stages: dict[str, Stage]) -> dict[str, int]:
    """Rows newly marked deleted per table: vanished from complete snapshots, replaced children."""
    deleted: dict[str, int] = {}
    for name in plan.complete_snapshots:
        marked = mark_vanished(conn, _target(catalog, name), stages.get(name), plan.loaded_at)
        deleted[name] = deleted.get(name, 0) + marked
    for link in plan.children:
        marked = replace_children(conn, _target(catalog, link.child), link, stages.get(link.parent),
                                  stages.get(link.child), plan.loaded_at)
        deleted[link.child] = deleted.get(link.child, 0) + marked
    return deleted


def parents_first(tables: tuple[TableLoad, ...]) -> list[TableLoad]:
    """Tables ordered so that a parent is staged before its children (stale parents taint children)."""
    by_name = {t.name: t for t in tables}

    def depth(table: TableLoad, seen: frozenset[str] = frozenset()) -> int:
        if table.parent is None or table.parent not in by_name or table.name in seen:
            return 0
        return 1 + depth(by_name[table.parent], seen | {table.name})

    return sorted(tables, key=depth)  # stable: write order within one depth


def _target(catalog: dict[str, TableDef], name: str) -> TableDef:
    target = catalog.get(name)
    if target is None:
        raise SchemaError(f"table {name} does not exist in the warehouse: create it with "
                          "Warehouse.ensure_tables(specs), or write a batch of it in this load.")
    return target


def _append(conn: duckdb.DuckDBPyConnection, load: TableLoad, target: TableDef, files: list[str],
            plan: LoadPlan) -> int:
    if not files:
        return 0
    types = dict(target.columns)
    columns = ", ".join(q(c) for c in load.columns)
    casts = ", ".join(f"CAST({q(c)} AS {types[c]})" for c in load.columns)
    ts = ts_literal(plan.loaded_at)
    result = conn.execute(
        f"INSERT INTO {table_ref(load.name)} ({columns}, first_loaded_at, last_loaded_at) "
        f"SELECT {casts}, {ts}, {ts} FROM read_parquet($files)", {"files": files}
    ).fetchone()
    return int(result[0])
