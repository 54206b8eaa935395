"""Rows that vanished from the source are marked, never dropped: deleted_at = the load time.

- Complete snapshot: a row of the table that this load did not see is deleted.
- Child replacement: when a parent row is reloaded, its children are exactly the children in this load
  (an answer's results or a session's registrations may shrink); the parent's other children are
  deleted. Children of parents that this load did not reload are left alone.
A row that comes back later gets deleted_at = NULL again (staging classifies it as an update).
"""

from __future__ import annotations

from datetime import datetime

import duckdb

from pipeline.warehouse.duck.arrow_types import q, ts_literal
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.duck.tabledef import DELETED_AT, TableDef
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.lake.manifest import ChildLink
from pipeline.warehouse.merge.staging import Slice, Stage, join_on, key_slices, value_range


def mark_vanished(conn: duckdb.DuckDBPyConnection, target: TableDef, stage: Stage | None, loaded_at: datetime) -> int:
    """Mark rows of a complete snapshot that are not in this load; returns how many."""
    _require_deleted_at(target, "be a complete snapshot")
    if stage is not None and stage.inserted_directly:
        return 0  # a first load: the table holds this load's rows and nothing else
    unseen = ""
    if stage is not None:
        unseen = f" AND NOT EXISTS (SELECT 1 FROM {q(stage.name)} AS s WHERE {join_on(target.key, 's', 't')})"
    return _mark(conn, target, f"t.{q(DELETED_AT)} IS NULL{unseen}", loaded_at)


def replace_children(
    conn: duckdb.DuckDBPyConnection,
    child: TableDef,
    link: ChildLink,
    parent: Stage | None,
    staged_children: Stage | None,
    loaded_at: datetime,
) -> int:
    """Mark children of reloaded parents that this load did not bring again; returns how many."""
    _require_deleted_at(child, f"have its children replaced (parent {link.parent})")
    if parent is None:
        return 0  # no parent row reloaded: nothing to replace
    if staged_children is not None and staged_children.inserted_directly:
        return 0  # the children's first load: every child row in the table is one this load brought
    # Two steps, so that the child table is only probed (its rows are never hashed): the live children of
    # the reloaded parents, by row id (hash table on the parent stage, the small side), minus those in
    # this load (both sides small); then an update by row id. Many reloaded parents (a full refresh) are taken
    # a slice of the first linked column at a time (staging.key_slices): their hash tables did not fit at once.
    child_column, parent_column = link.on[0]  # only where the parents lie (zone maps skip row groups outside)
    in_range = value_range(conn, parent.relation, parent_column)
    marked = 0
    for part in key_slices(conn, parent.relation, parent_column):
        marked += _mark_gone_children(conn, child, link, parent, staged_children, loaded_at, part, in_range)
    return marked


def _mark_gone_children(
    conn: duckdb.DuckDBPyConnection,
    child: TableDef,
    link: ChildLink,
    parent: Stage,
    staged_children: Stage | None,
    loaded_at: datetime,
    part: Slice,
    in_range: dict[str, object],
) -> int:
    """replace_children within one slice of the parents' first linked column."""
    owner = " AND ".join(f"t.{q(cc)} = p.{q(pc)}" for cc, pc in link.on)
    gone = f"_gone_{child.name}"
    key = ", ".join(f"t.{q(k)}" for k in child.key)
    child_column, parent_column = link.on[0]
    conn.execute(f"DROP TABLE IF EXISTS temp.{q(gone)}")
    conn.execute(
        f"CREATE TEMP TABLE {q(gone)} AS SELECT t.rowid AS _rowid, {key} FROM {table_ref(child.name)} AS t "
        f"JOIN (SELECT * FROM {parent.relation} WHERE _change <> 'stale' AND {part.where(q(parent_column))}) AS p "
        f"ON {owner} WHERE t.{q(DELETED_AT)} IS NULL AND t.{q(child_column)} BETWEEN $lowest AND $highest "
        f"AND {part.where('t.' + q(child_column))}",
        {**in_range, **part.params},
    )
    unseen = gone
    if staged_children is not None:
        # Those this load brought again are left out by an anti join into a table of its own: a DELETE of them from
        # `gone` (nearly all of it in a full refresh) ran out of memory inside the load's transaction.
        # A staged child of the same key has the same linked value when that column is part of the key.
        among = part.where("s." + q(child_column)) if child_column in child.key else "TRUE"
        unseen = f"_unseen_{child.name}"
        keys = ", ".join(q(k) for k in child.key)
        conn.execute(f"DROP TABLE IF EXISTS temp.{q(unseen)}")
        conn.execute(
            f"CREATE TEMP TABLE {q(unseen)} AS SELECT g._rowid FROM temp.{q(gone)} AS g "
            f"ANTI JOIN (SELECT {keys} FROM {q(staged_children.name)} AS s WHERE {among}) AS s "
            f"ON {join_on(child.key, 's', 'g')}",
            part.params if among != "TRUE" else {},
        )
        conn.execute(f"DROP TABLE temp.{q(gone)}")
    try:
        return _mark(conn, child, f"t.rowid IN (SELECT _rowid FROM temp.{q(unseen)})", loaded_at)
    finally:
        conn.execute(f"DROP TABLE temp.{q(unseen)}")


def _mark(conn: duckdb.DuckDBPyConnection, target: TableDef, where: str, loaded_at: datetime) -> int:
    result = conn.execute(
        f"UPDATE {table_ref(target.name)} AS t SET {q(DELETED_AT)} = {ts_literal(loaded_at)} WHERE {where}"
    ).fetchone()
    return int(result[0]) if result else 0


def _require_deleted_at(table: TableDef, role: str) -> None:
    if not table.has_deleted_at:
        raise SchemaError(
            f"table {table.name} has no {DELETED_AT} column, so it cannot {role}; only snapshot "
            "tables and child tables (spec.parent set) keep deleted rows."
        )
