"""The commit of one load, in this order (why: see merge/recovery.py):

1. take the write lock (open read-write) and roll forward any load whose manifest outlived a crash;
2. create/evolve the written tables (own transaction); BEGIN; apply the load (upserts, deletions, cursor,
   _load_runs);
3. write the manifest once (create-if-absent), after every part it names is stored: the commit point (a repeated
   snapshot's manifest names the parts of the load it repeats);
4. COMMIT. If COMMIT raises and the load is certainly not in DuckDB, the manifest is removed again
   (if that cannot be told, it stays and the next writer rolls the load forward). Then the parts the manifest
   does not name are removed.

A first load inserted while it was written (early_insert.py) did 1, evolved its tables and BEGAN while its fetch
still ran; its commit goes on with 2's apply, in that transaction.

A crash before 3 leaves the old warehouse and no manifest; between 3 and 4, the next writer replays the
manifest; after 4 both agree. Either way: old cursor with old rows, or new cursor with new rows.

The Iceberg mirror is not part of a commit: its own step follows the raw commits (pipeline/defs/lake/), so
nothing on the Iceberg side can fail, delay or undo a load."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext, suppress
from dataclasses import replace
from datetime import datetime
from typing import Any

import duckdb

from pipeline.contract.evolution import DiscoveredColumn
from pipeline.warehouse import hooks
from pipeline.warehouse.duck.schema import ensure_tables, table_def
from pipeline.warehouse.errors import LakeError, SchemaError
from pipeline.warehouse.lake.lake import check_parts, list_manifests, manifest_name
from pipeline.warehouse.lake.lakestore import LakeStore
from pipeline.warehouse.lake.manifest import LoadPlan, TableLoad, from_json, to_json
from pipeline.warehouse.loading.links import ChildLinks, resolve_links
from pipeline.warehouse.loading.protocols import EarlyCommit, PendingLoad
from pipeline.warehouse.merge.apply import apply_load
from pipeline.warehouse.merge.recovery import recover
from pipeline.warehouse.merge.state import LOAD_RUNS, applied_loads, ensure_state_tables, next_load_time
from pipeline.warehouse.results import LoadResult


def commit_load(
    load: PendingLoad,
    tables: tuple[TableLoad, ...],
    cursor: datetime | None,
    complete_snapshots: tuple[str, ...],
    replace_children_of: ChildLinks | None,
    stats: Mapping[str, Any],
    *,
    cursor_reset: bool = False,
    position: int | None = None,
    drop_before: tuple[str, ...] = (),
    early: EarlyCommit | None = None,
    discovered: tuple[DiscoveredColumn, ...] = (),
) -> LoadResult:
    """`early`: the transaction begun before the load was written whole (early_insert.py); it is finished here,
    on its connection, unless an early insert failed (then the commit is the ordinary one, on that connection)."""
    warehouse = load.warehouse
    with nullcontext(early.conn) if early is not None else warehouse.connect(read_only=False) as conn:
        ctx = warehouse.commit_context(conn)
        if early is not None and early.open:
            # the lock taken, the tables evolved and the load's time fixed when the transaction began
            ctx = replace(ctx, early=early)
            try:
                plan = _plan(
                    conn,
                    load,
                    tables,
                    cursor,
                    complete_snapshots,
                    replace_children_of,
                    stats,
                    cursor_reset,
                    loaded_at=early.loaded_at,
                )
            except BaseException:
                conn.rollback()
                raise
        else:
            ensure_state_tables(conn)
            recover(ctx)
            conn.begin()  # creating or evolving the tables commits on its own: empty tables, no cursor, no rows
            try:
                plan = _plan(conn, load, tables, cursor, complete_snapshots, replace_children_of, stats, cursor_reset)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
            conn.begin()
        # a column discovered only in rows that were all set aside never reached its table: not recorded
        columns = {(t.name, c) for t in plan.catalog for c in t.column_names}
        discovered = tuple(c for c in discovered if (c.table, c.column) in columns)
        plan = replace(plan, position=position, drop_before=drop_before, discovered=discovered)
        try:
            outcome = apply_load(ctx, plan)
            hooks.reached("applied")
            written = plan
            if outcome.repeat_of is not None:
                plan = _with_parts_of_the_repeated_load(conn, warehouse.lake, plan, outcome.repeat_of)
            name = manifest_name(plan.seq, plan.load_id)
            manifest = warehouse.lake.create_manifest(name, to_json(plan, outcome))
            hooks.reached("manifest_written")
        except BaseException:
            conn.rollback()
            raise
        try:
            conn.commit()
        except BaseException:
            if _certainly_not_committed(conn, plan.seq):
                warehouse.lake.remove_manifest(name)  # a clean failure; otherwise the next writer rolls forward
            raise
        hooks.reached("committed")
        for directory in _directories_no_longer_named(written, plan):
            warehouse.lake.remove_directory(directory)
        if early is not None and ctx.early is not None:  # committed through it: the mirror files it wrote are offered
            early.committed()
    return LoadResult(
        plan.stream,
        plan.run_id,
        plan.load_id,
        plan.seq,
        plan.loaded_at,
        outcome.cursor_before,
        outcome.cursor_after,
        outcome.tables,
        manifest,
        outcome.position_before,
        outcome.position_after,
        outcome.repeat_of,
    )


def _plan(
    conn: duckdb.DuckDBPyConnection,
    load: PendingLoad,
    tables: tuple[TableLoad, ...],
    cursor: datetime | None,
    complete_snapshots: tuple[str, ...],
    replace_children_of: ChildLinks | None,
    stats: Mapping[str, Any],
    cursor_reset: bool = False,
    loaded_at: datetime | None = None,
) -> LoadPlan:
    catalog = ensure_tables(conn, [table_def(spec) for spec in load.specs.values()])
    for name in complete_snapshots:
        if name not in catalog:
            raise SchemaError(
                f"complete_snapshots names table {name!r}, which the warehouse does not have; "
                "create it with Warehouse.ensure_tables(specs) or check the name."
            )
    links = resolve_links(catalog, {t.name for t in tables}, replace_children_of)
    return LoadPlan(
        seq=_next_seq(conn, load.warehouse.lake),
        load_id=load.load_id,
        stream=load.stream,
        run_id=load.run_id,
        started_at=load.started_at,
        loaded_at=loaded_at or next_load_time(conn, load.warehouse.clock()),
        cursor=cursor,
        tables=tables,
        complete_snapshots=complete_snapshots,
        children=links,
        catalog=tuple(catalog.values()),
        stats=stats,
        cursor_reset=cursor_reset,
    )


def _with_parts_of_the_repeated_load(
    conn: duckdb.DuckDBPyConnection, lake: LakeStore, plan: LoadPlan, repeat_of: int
) -> LoadPlan:
    """A load that repeats load `repeat_of` row for row (merge/repeats.py) names that load's parts in its manifest
    instead of its own, which are removed once it has committed: a quiet night's snapshots add no copy of their rows
    to the lake. A table is switched only where the earlier manifest shows the same rows (the same content digest)
    in the same columns and types; otherwise (also when the earlier manifest cannot be read) the load keeps its own
    parts, as before: what saves space never fails a load."""
    # its manifest by the name lms._load_runs gives it, not by listing every manifest of the lake again
    name = manifest_name(repeat_of, applied_loads(conn)[repeat_of])
    where = str(lake.manifest_location(name))
    try:
        earlier, _ = from_json(lake.read_manifest(name), where)
    except (LakeError, OSError):  # none (tables adopted from outside the lake), or not readable
        return plan
    earlier_tables = {table.name: table for table in earlier.tables}
    earlier_defs = {table.name: table.columns for table in earlier.catalog}
    defs = {table.name: table.columns for table in plan.catalog}
    tables = []
    for table in plan.tables:
        before = earlier_tables.get(table.name)
        if (
            before is not None
            and before.parts
            and table.content is not None
            and replace(before, parts=table.parts) == table  # the same digest, columns, key and kind
            and earlier_defs.get(table.name) == defs.get(table.name)
            and _intact(lake, before, where)
        ):
            table = replace(table, parts=before.parts)
        tables.append(table)
    return replace(plan, tables=tuple(tables))


def _intact(lake: LakeStore, table: TableLoad, manifest: str) -> bool:
    """Whether the parts `manifest` names for `table` are all there, whole (a damaged lake keeps the new copy)."""
    try:
        check_parts(lake, table.parts, manifest)
    except LakeError:
        return False
    return True


def _directories_no_longer_named(written: LoadPlan, committed: LoadPlan) -> set[str]:
    """The folders of the parts this load wrote that its manifest does not name (it names a repeated load's)."""
    named = {part.path.rsplit("/", 1)[0] for table in committed.tables for part in table.parts}
    own = {part.path.rsplit("/", 1)[0] for table in written.tables for part in table.parts}
    return own - named


def _certainly_not_committed(conn: duckdb.DuckDBPyConnection, seq: int) -> bool:
    """After COMMIT raised: True only if this connection can still see that load `seq` is absent."""
    with suppress(duckdb.Error):  # no transaction left open: the usual case after a failed COMMIT
        conn.rollback()
    try:
        return not conn.execute(f"SELECT count(*) FROM {LOAD_RUNS} WHERE load_seq = ?", [seq]).fetchall()[0][0]
    except duckdb.Error:
        return False


def _next_seq(conn: duckdb.DuckDBPyConnection, lake: LakeStore) -> int:
    in_lake = [seq for seq, _ in list_manifests(lake)]
    return max([0, *applied_loads(conn), *in_lake]) + 1
