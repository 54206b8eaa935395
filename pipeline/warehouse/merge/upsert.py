"""Applying a classified stage (staging.py) to its warehouse table in bulk, never row by row. One strategy;
bench/upsert_options.py measures it against the ones that lost (docs/warehouse.md, "Upsert strategy").

Target rows are matched by the row id staging recorded (one BIGINT instead of the whole key; the tables have
no key index to look a key up in), in row-id order: DuckDB updates rows in place fastest when they come in
storage order (duckdb#11275). Scalar changes are updated in place; rows whose list columns changed are
deleted and re-inserted (DuckDB rewrites a changed list that way anyway); unchanged rows are not written at all
(a look-back window or a snapshot reads them again: a load costs what it changes); new keys are inserted sorted by
key. Each target row is touched by exactly one statement, so no statement moves a row id another one uses.

A first load into an empty table skips all that (insert_first_load): the deduped rows inserted at once, in
no particular order, no stage."""

from __future__ import annotations

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.connection import insertion_order_not_kept
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.duck.tabledef import DELETED_AT, FIRST_LOADED_AT, LAST_LOADED_AT, TableDef
from pipeline.warehouse.lake.manifest import TableLoad
from pipeline.warehouse.merge.staging import (
    Stage,
    deduped_sql,
    duplicate_keys_of,
    is_list_type,
    old_value_column,
    values_must_fit,
)

BY_ROWID = "t.rowid = s._rowid"  # `t`: the warehouse table, `s`: the stage


def upsert_stage(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """Apply `stage` to its table with load time `ts` (a SQL TIMESTAMPTZ literal, arrow_types.ts_literal)."""
    if not stage.target_was_empty:  # else every row is an insert: nothing to match
        types = dict(stage.target.columns)
        scalars = [c for c in data_columns(stage) if not is_list_type(types[c])]
        update_rows(conn, stage, ts, ("update",), scalars, BY_ROWID)
        delete_rows(conn, stage, ("rewrite",), BY_ROWID)
    insert_rows(conn, stage, ts, ("insert", "rewrite"), sort=True)


def insert_first_load(
    conn: duckdb.DuckDBPyConnection, load: TableLoad, target: TableDef, files: list[str], ts: str
) -> Stage:
    """Insert the load's deduped rows into `target`, which is empty: no temp copy, no classification (every row
    is new), and no window unless some key occurs twice. Returns the stage that stands for them (Stage.inserted:
    their count; Stage.relation: the table itself).

    One INSERT, in no particular order, on every core: sorting by key costs several times as much (range by
    range, to fit the memory limit), and nothing reads the table faster for its key order (docs/warehouse.md,
    "First loads")."""
    with values_must_fit(load), duplicate_keys_of(conn, load, target, files) as duplicates:
        inserted = insert_parts(conn, load, target, files, ts, duplicates)
    return Stage(f"_stage_{load.name}", load, target, True, inserted)


def insert_parts(
    conn: duckdb.DuckDBPyConnection,
    load: TableLoad,
    target: TableDef,
    files: list[str],
    ts: str,
    duplicates: str | None = None,
) -> int:
    """Insert the rows of the Parquet parts `files`, deduped as staging.deduped_sql says, in no particular order
    and without looking at the table's rows; returns their count."""
    columns = ", ".join(q(c) for c in load.columns)
    with insertion_order_not_kept(conn):
        inserted = conn.execute(
            f"INSERT INTO {table_ref(target.name)} ({columns}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)}) "
            f"SELECT {columns}, {ts}, {ts} FROM ({deduped_sql(load, target, duplicates)})",
            {"files": files},
        ).fetchall()[0][0]
    return int(inserted)


def data_columns(stage: Stage) -> list[str]:
    return [c for c in stage.load.columns if c not in stage.load.key]


def set_list(stage: Stage, columns: list[str], ts: str, source: str) -> str:
    """SET clause of a changed row: its data columns from `source`, the load time, deleted_at cleared."""
    sets = [f"{q(c)} = {source}.{q(c)}" for c in columns] + [f"{q(LAST_LOADED_AT)} = {ts}"]
    if stage.target.has_deleted_at:
        sets.append(f"{q(DELETED_AT)} = NULL")
    return ", ".join(sets)


def update_rows(
    conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...], columns: list[str], match: str
) -> None:
    """Update `columns` of the rows classified as one of `changes`; `match` pairs table row `t` with stage row `s`."""
    conn.execute(
        f"UPDATE {table_ref(stage.target.name)} AS t SET {set_list(stage, columns, ts, 's')} "
        f"FROM {q(stage.name)} AS s WHERE s._change IN {changes_in(changes)} AND {match}"
    )


def delete_rows(conn: duckdb.DuckDBPyConnection, stage: Stage, changes: tuple[str, ...], match: str) -> None:
    conn.execute(
        f"DELETE FROM {table_ref(stage.target.name)} AS t USING {q(stage.name)} AS s "
        f"WHERE s._change IN {changes_in(changes)} AND {match}"
    )


def insert_rows(
    conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...], *, sort: bool
) -> None:
    """Insert staged rows; rows re-inserted after a delete keep first_loaded_at and the columns this
    load does not carry from their old version."""
    names = [q(c) for c in stage.load.columns]
    values = list(names)
    for column in stage.carried:
        names.append(q(column))
        old = q(old_value_column(column))
        values.append(f"coalesce({old}, {ts})" if column == FIRST_LOADED_AT else old)
    names.append(q(LAST_LOADED_AT))
    values.append(ts)
    order = f" ORDER BY {', '.join(q(k) for k in stage.load.key)}" if sort else ""
    conn.execute(
        f"INSERT INTO {table_ref(stage.target.name)} ({', '.join(names)}) "
        f"SELECT {', '.join(values)} FROM {q(stage.name)} WHERE _change IN {changes_in(changes)}{order}"
    )


def changes_in(changes: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{c}'" for c in changes) + ")"
