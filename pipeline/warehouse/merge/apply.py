"""One load applied to the warehouse inside the caller's transaction. The same function serves a live
commit, the roll-forward of a load whose manifest was written just before a crash, and a rebuild from
the lake, so all three produce the same rows, load timestamps, cursor and counts. A complete snapshot writes only
the rows it changes, and one that repeats the table's last one is applied without its rows being compared
(repeats.py), with the same result: no row written."""

from __future__ import annotations

from dataclasses import replace

import duckdb

from pipeline.warehouse.duck.arrow_types import q, ts_literal
from pipeline.warehouse.duck.connection import out_of_memory_named
from pipeline.warehouse.duck.schema import drop_tables, ensure_tables, table_ref
from pipeline.warehouse.duck.tabledef import TableDef
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.lake.lake import check_parts
from pipeline.warehouse.lake.manifest import LoadOutcome, LoadPlan, TableLoad
from pipeline.warehouse.merge.context import CommitContext
from pipeline.warehouse.merge.deletions import mark_vanished, replace_children
from pipeline.warehouse.merge.repeats import repeated_load, repeated_stats
from pipeline.warehouse.merge.staging import (
    Stage,
    count_changes,
    create_stage,
    drop_stage,
    has_stale_rows,
    join_on,
    mark_stale_children,
    target_is_empty,
)
from pipeline.warehouse.merge.state import advance_cursor, advance_position, record_discovered, record_load
from pipeline.warehouse.merge.upsert import insert_first_load
from pipeline.warehouse.results import TableLoadStats


def apply_load(ctx: CommitContext, plan: LoadPlan) -> LoadOutcome:
    """Needs the internal tables (state.ensure_state_tables) to exist already. DuckDB running out of memory
    becomes a MemoryLimitError naming the stream, the load and the setting."""
    with out_of_memory_named(ctx.conn, f"applying load {plan.seq} of stream {plan.stream}"):
        return _apply_load(ctx, plan)


def _apply_load(ctx: CommitContext, plan: LoadPlan) -> LoadOutcome:
    conn = ctx.conn
    drop_tables(conn, plan.drop_before)  # tables whose rows were written outside the lake: this load holds them
    dropped_only = set(plan.drop_before) - {t.name for t in plan.tables}
    # replays: the tables as they were at that commit
    catalog = ensure_tables(conn, [t for t in plan.catalog if t.name not in dropped_only])
    files = {
        load.name: check_parts(ctx.lake, load.parts, f"load {plan.seq} ({plan.load_id})", conn) for load in plan.tables
    }
    repeat = repeated_load(conn, plan, catalog, files)
    stats = repeated_stats(plan, repeat) if repeat is not None else _apply_rows(ctx, plan, catalog, files)
    before, after = advance_cursor(conn, plan)
    repeat_of = repeat.of if repeat is not None else None
    outcome = LoadOutcome(before, after, stats, *advance_position(conn, plan), repeat_of=repeat_of)
    record_load(conn, plan, outcome)
    record_discovered(conn, plan, catalog)
    return outcome


def _apply_rows(
    ctx: CommitContext, plan: LoadPlan, catalog: dict[str, TableDef], files: dict[str, list[str]]
) -> dict[str, TableLoadStats]:
    """The ordinary apply: stage, classify and upsert every table, then mark what vanished."""
    conn = ctx.conn
    stats, stages = _stage_tables(ctx, plan, catalog, files)
    order = [t.name for t in parents_first(plan.tables)]
    for link in sorted(plan.children, key=lambda link: order.index(link.parent) if link.parent in order else -1):
        if link.child in stages and link.parent in stages:  # top down: a grandparent's staleness reaches the bottom
            mark_stale_children(conn, stages[link.child], stages[link.parent], link)
    for name, stage in stages.items():
        counts = count_changes(conn, stage)
        if not stage.inserted_directly:
            ctx.upsert(conn, stage, ts_literal(plan.loaded_at))
        stats[name] = TableLoadStats(
            fetched=sum(p.rows for p in stage.load.parts),
            inserted=counts["insert"],
            updated=counts["update"] + counts["rewrite"],
            unchanged=counts["same"],
            stale=counts["stale"],
        )
    for name, count in _mark_deleted(conn, plan, catalog, stages).items():
        stats[name] = replace(stats.get(name, TableLoadStats()), deleted=count)
    for stage in stages.values():
        drop_stage(conn, stage)
    return stats


def _stage_tables(
    ctx: CommitContext, plan: LoadPlan, catalog: dict[str, TableDef], files: dict[str, list[str]]
) -> tuple[dict[str, TableLoadStats], dict[str, Stage]]:
    """Append tables are inserted at once; the others are staged (deduped and classified) for upsert, except
    a first load into an empty table, inserted at once too (upsert.insert_first_load, or finished where it went in
    early: loading/early_insert.py) unless a parent row of it is stale in this load (then its children must be
    told apart first)."""
    stats: dict[str, TableLoadStats] = {}
    stages: dict[str, Stage] = {}
    for load in parents_first(plan.tables):
        target = _target(catalog, load.name)
        parts = files[load.name]
        early = ctx.early if ctx.early is not None and ctx.early.holds(load.name) else None
        if load.kind == "append":
            fetched = sum(part.rows for part in load.parts)
            inserted = _append(ctx.conn, load, target, parts, plan)
            stats[load.name] = TableLoadStats(fetched=fetched, inserted=inserted, unchanged=fetched - inserted)
        elif not parts:
            stats[load.name] = TableLoadStats()
        elif early is not None and not _has_stale_parent(ctx.conn, plan, load.name, stages):
            stages[load.name] = early.stage(load, target, parts)
        else:
            if early is not None:  # its rows must be staged against their stale parents instead
                early.take_out(load.name)
            if (empty := target_is_empty(ctx.conn, target)) and not _has_stale_parent(
                ctx.conn, plan, load.name, stages
            ):
                stages[load.name] = insert_first_load(ctx.conn, load, target, parts, ts_literal(plan.loaded_at))
            else:
                linked = _linked_columns(plan, load.name)
                stages[load.name] = create_stage(ctx.conn, load, target, parts, empty, linked)
    return stats, stages


def _linked_columns(plan: LoadPlan, table: str) -> set[str]:
    """The columns of `table` that the load's links join on, on the child's side or the parent's."""
    columns: set[str] = set()
    for link in plan.children:
        for child, parent in link.on:
            if link.child == table:
                columns.add(child)
            if link.parent == table:
                columns.add(parent)
    return columns


def _has_stale_parent(
    conn: duckdb.DuckDBPyConnection,
    plan: LoadPlan,
    child: str,
    stages: dict[str, Stage],
    seen: frozenset[str] = frozenset(),
) -> bool:
    """Whether a parent row of `child` is, or may become, stale in this load: stale itself, or under a parent
    that may be (mark_stale_children passes staleness down after every table is staged)."""
    return any(
        has_stale_rows(conn, stages[link.parent]) or _has_stale_parent(conn, plan, link.parent, stages, seen | {child})
        for link in plan.children
        if link.child == child and link.parent in stages and link.parent not in seen
    )


def _mark_deleted(
    conn: duckdb.DuckDBPyConnection, plan: LoadPlan, catalog: dict[str, TableDef], stages: dict[str, Stage]
) -> dict[str, int]:
    """Rows newly marked deleted per table: vanished from complete snapshots, replaced children."""
    deleted: dict[str, int] = {}
    for name in plan.complete_snapshots:
        marked = mark_vanished(conn, _target(catalog, name), stages.get(name), plan.loaded_at)
        deleted[name] = deleted.get(name, 0) + marked
    for link in plan.children:
        marked = replace_children(
            conn, _target(catalog, link.child), link, stages.get(link.parent), stages.get(link.child), plan.loaded_at
        )
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
        raise SchemaError(
            f"table {name} does not exist in the warehouse: create it with "
            "Warehouse.ensure_tables(specs), or write a batch of it in this load."
        )
    return target


def _append(
    conn: duckdb.DuckDBPyConnection, load: TableLoad, target: TableDef, files: list[str], plan: LoadPlan
) -> int:
    """Rows are never updated. A keyed append table (an event log) keeps a key's first row: a key already in
    the table, or written earlier in this load, adds nothing (a redelivered event is not a new one)."""
    if not files:
        return 0
    types = dict(target.columns)
    columns = ", ".join(q(c) for c in load.columns)
    casts = ", ".join(f"CAST({q(c)} AS {types[c]}) AS {q(c)}" for c in load.columns)
    ts = ts_literal(plan.loaded_at)
    source = f"SELECT {casts} FROM {load.scan()}"
    if target.key:
        keys = ", ".join(q(k) for k in target.key)
        source = f"""WITH src AS (
                SELECT {casts}, _lake_file, file_row_number
                FROM {load.scan("filename = '_lake_file', file_row_number = true")})
            SELECT {columns} FROM src AS s
            WHERE NOT EXISTS (SELECT 1 FROM {table_ref(load.name)} AS t WHERE {join_on(target.key, "s", "t")})
            QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY _lake_file, file_row_number) = 1"""
    result = conn.execute(
        f"INSERT INTO {table_ref(load.name)} ({columns}, first_loaded_at, last_loaded_at) "
        f"SELECT {columns}, {ts}, {ts} FROM ({source})",
        {"files": files},
    ).fetchall()
    return int(result[0][0])
