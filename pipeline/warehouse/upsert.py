"""Applying a classified stage (staging.py) to its warehouse table in bulk, never row by row. One strategy;
bench/upsert_options.py measures it against the ones that lost (docs/warehouse.md, "Upsert strategy").

Target rows are matched by the row id staging recorded (one BIGINT instead of the whole key; the tables have
no key index to look a key up in), in row-id order: DuckDB updates rows in place fastest when they come in
storage order (duckdb#11275). Scalar changes are updated in place; rows whose list columns changed are
deleted and re-inserted (DuckDB rewrites a changed list that way anyway); unchanged rows only get a new
last_loaded_at; new keys are inserted sorted by key. Each target row is touched by exactly one statement, so
no statement moves a row id another one uses.

A first load into an empty table skips all that (insert_first_load): the deduped rows inserted sorted by key,
range by range of the first key column when they are many, no stage, so the table starts in key order, which
staging's range-limited scans rely on."""

from __future__ import annotations

import duckdb

from pipeline.warehouse.arrow_types import q
from pipeline.warehouse.manifest import TableLoad
from pipeline.warehouse.ranges import key_ranges, range_bounds
from pipeline.warehouse.schema import DELETED_AT, FIRST_LOADED_AT, LAST_LOADED_AT, TableDef, table_ref
from pipeline.warehouse.staging import Stage, deduped_sql, duplicate_keys_of, is_list_type, values_must_fit

FIRST_LOAD_SLICE_ROWS = 500_000  # rows a first load sorts at once: within 160MiB with little spilling (docs)
BY_ROWID = "t.rowid = s._rowid"  # `t`: the warehouse table, `s`: the stage


def upsert_stage(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """Apply `stage` to its table with load time `ts` (a SQL TIMESTAMPTZ literal, arrow_types.ts_literal)."""
    if not stage.target_was_empty:  # else every row is an insert: nothing to match
        types = dict(stage.target.columns)
        scalars = [c for c in data_columns(stage) if not is_list_type(types[c])]
        update_rows(conn, stage, ts, ("update",), scalars, BY_ROWID)
        touch_rows(conn, stage, ts, BY_ROWID)
        delete_rows(conn, stage, ("rewrite",), BY_ROWID)
    insert_rows(conn, stage, ts, ("insert", "rewrite"), sort=True)


def insert_first_load(conn: duckdb.DuckDBPyConnection, load: TableLoad, target: TableDef, files: list[str],
                      ts: str, *, parts_are_local: bool = True) -> Stage:
    """Insert the load's deduped rows into `target`, which is empty, sorted by key: no temp copy, no
    classification (every row is new), and no window unless some key occurs twice. Returns the stage that
    stands for them (Stage.inserted: their count; Stage.relation: the table itself).

    A load of more than FIRST_LOAD_SLICE_ROWS rows is inserted range by range of its first key column, one
    sorted INSERT a range, ranges in ascending order: the table still ends in key order, and each sort fits the
    memory limit (one sort of 9.7M answers needed 300MiB, and DuckDB then kept that much resident; in
    slices of ~500k rows it stays within 160MiB and spills little). A key's rows are all in one range, so the
    dedupe is the same; rows with a NULL first key column go with the first range (and fail its NOT NULL).
    Every range reads the parts again (they come in random key order): from a local lake that is the page
    cache; parts in object storage (`parts_are_local` False) are read once into a temp table instead, so the
    ranges do not download them again."""
    key = ", ".join(q(k) for k in load.key)
    columns = ", ".join(q(c) for c in load.columns)
    first = q(load.key[0])
    spool = f"_first_load_{load.name}"
    with values_must_fit(load), duplicate_keys_of(conn, load, target, files) as duplicates:
        deduped, params = deduped_sql(load, target, duplicates), {"files": files}
        many = sum(part.rows for part in load.parts) > FIRST_LOAD_SLICE_ROWS
        spooled = many and not parts_are_local
        if spooled:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE {q(spool)} AS {deduped}", params)
        rows, params = (f"temp.{q(spool)}", {}) if spooled else (f"({deduped})", params)
        bounds = range_bounds(conn, f"(SELECT {first} FROM {rows})", f"c.{first}", params,
                              FIRST_LOAD_SLICE_ROWS) if many else None
        slices = key_ranges(bounds, f"d.{first}") if bounds else [("TRUE", {})]
        inserted = 0
        for index, (where, bound) in enumerate(slices):
            if index == 0:
                where = f"({where} OR d.{first} IS NULL)"
            inserted += conn.execute(
                f"INSERT INTO {table_ref(target.name)} ({columns}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)}) "
                f"SELECT {columns}, {ts}, {ts} FROM {rows} AS d WHERE {where} ORDER BY {key}",
                {**params, **bound} or None).fetchone()[0]
        if spooled:
            conn.execute(f"DROP TABLE temp.{q(spool)}")
    return Stage(f"_stage_{load.name}", load, target, True, int(inserted))


def data_columns(stage: Stage) -> list[str]:
    return [c for c in stage.load.columns if c not in stage.load.key]


def set_list(stage: Stage, columns: list[str], ts: str, source: str) -> str:
    """SET clause of a changed row: its data columns from `source`, the load time, deleted_at cleared."""
    sets = [f"{q(c)} = {source}.{q(c)}" for c in columns] + [f"{q(LAST_LOADED_AT)} = {ts}"]
    if stage.target.has_deleted_at:
        sets.append(f"{q(DELETED_AT)} = NULL")
    return ", ".join(sets)


def update_rows(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...],
                columns: list[str], match: str) -> None:
    """Update `columns` of the rows classified as one of `changes`; `match` pairs table row `t` with stage row `s`."""
    conn.execute(
        f"UPDATE {table_ref(stage.target.name)} AS t SET {set_list(stage, columns, ts, 's')} "
        f"FROM {q(stage.name)} AS s WHERE s._change IN {changes_in(changes)} AND {match}"
    )


def touch_rows(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, match: str) -> None:
    """Rows seen again unchanged: only last_loaded_at moves (a narrow, in-place update)."""
    conn.execute(
        f"UPDATE {table_ref(stage.target.name)} AS t SET {q(LAST_LOADED_AT)} = {ts} "
        f"FROM {q(stage.name)} AS s WHERE s._change = 'same' AND {match}"
    )


def delete_rows(conn: duckdb.DuckDBPyConnection, stage: Stage, changes: tuple[str, ...], match: str) -> None:
    conn.execute(
        f"DELETE FROM {table_ref(stage.target.name)} AS t USING {q(stage.name)} AS s "
        f"WHERE s._change IN {changes_in(changes)} AND {match}"
    )


def insert_rows(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...], *,
                sort: bool) -> None:
    """Insert staged rows; rows re-inserted after a delete keep first_loaded_at and the columns this
    load does not carry from their old version."""
    names = [q(c) for c in stage.load.columns]
    values = list(names)
    for column in stage.carried:
        names.append(q(column))
        old = q("_old_" + column)
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
