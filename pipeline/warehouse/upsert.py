"""Applying a classified stage (staging.py) to its warehouse table in bulk, never row by row.

Strategies (bench/upsert_options.py measures them; see docs/warehouse.md for the numbers):
  auto          default. Empty table: insert into an index-less copy, then ALTER TABLE ADD PRIMARY KEY
                (bulk index build). Otherwise: UPDATE ... FROM in place for scalar changes, DELETE +
                sorted INSERT for rows whose list columns changed, plain INSERT for new keys.
  update_insert UPDATE ... FROM for every changed row, INSERT for new keys.
  merge         one MERGE INTO.
  on_conflict   INSERT ... ON CONFLICT (key) DO UPDATE.
  delete_insert DELETE every changed key, then INSERT changed and new rows sorted by key.
All give the same table; they differ only in speed.
"""

from __future__ import annotations

from datetime import datetime

import duckdb

from pipeline.warehouse.arrow_types import q
from pipeline.warehouse.schema import (
    DELETED_AT,
    FIRST_LOADED_AT,
    LAST_LOADED_AT,
    TableDef,
    create_table,
    table_ref,
)
from pipeline.warehouse.staging import Stage, is_list_type, join_on

STRATEGIES = ("auto", "update_insert", "merge", "on_conflict", "delete_insert")
DEFAULT_STRATEGY = "auto"


def ts_literal(value: datetime) -> str:
    return f"TIMESTAMPTZ '{value.isoformat()}'"


def apply_stage(conn: duckdb.DuckDBPyConnection, stage: Stage, loaded_at: datetime, strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown upsert strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    ts = ts_literal(loaded_at)
    if strategy == "auto" and stage.target_was_empty:
        _bulk_first_load(conn, stage, ts)
        return
    {"auto": _auto, "update_insert": _update_insert, "merge": _merge, "on_conflict": _on_conflict,
     "delete_insert": _delete_insert}[strategy](conn, stage, ts)


def _bulk_first_load(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """Inserting into an indexed table maintains the ART index row by row; building it once after the
    insert is several times faster. The table is empty, so re-creating it loses nothing."""
    target = stage.target
    conn.execute(f"DROP TABLE {table_ref(target.name)}")
    create_table(conn, TableDef(target.name, target.columns, (), target.comment))
    _insert(conn, stage, ts, ("insert",), sort=False)
    if target.key:
        conn.execute(f"ALTER TABLE {table_ref(target.name)} ADD PRIMARY KEY ({', '.join(q(k) for k in target.key)})")


def _auto(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """Matches target rows by the row ids staging recorded (one BIGINT instead of the whole key) in row id
    order: DuckDB updates rows in place fastest when they come in storage order (duckdb#11275). Each
    target row is touched by exactly one statement, so no statement moves a row id another one uses."""
    types = dict(stage.target.columns)
    scalars = [c for c in _data_columns(stage) if not is_list_type(types[c])]
    _update(conn, stage, ts, ("update",), scalars, by_rowid=True)
    _touch(conn, stage, ts, by_rowid=True)
    _delete(conn, stage, ("rewrite",), by_rowid=True)
    _insert(conn, stage, ts, ("insert", "rewrite"), sort=True)


def _update_insert(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    _update(conn, stage, ts, ("update", "rewrite"), _data_columns(stage))
    _touch(conn, stage, ts)
    _insert(conn, stage, ts, ("insert",), sort=False)


def _delete_insert(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    _touch(conn, stage, ts)
    _delete(conn, stage, ("update", "rewrite"))
    _insert(conn, stage, ts, ("insert", "update", "rewrite"), sort=True)


def _merge(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    cols = stage.load.columns
    conn.execute(
        f"""MERGE INTO {table_ref(stage.target.name)} AS t
        USING (SELECT * FROM {q(stage.name)} WHERE _change <> 'stale') AS s ON {join_on(stage.load.key, 't', 's')}
        WHEN MATCHED AND s._change = 'same' THEN UPDATE SET {q(LAST_LOADED_AT)} = {ts}
        WHEN MATCHED THEN UPDATE SET {_set_list(stage, _data_columns(stage), ts, 's')}
        WHEN NOT MATCHED THEN INSERT ({', '.join(q(c) for c in cols)}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)})
            VALUES ({', '.join('s.' + q(c) for c in cols)}, {ts}, {ts})"""
    )


def _on_conflict(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    cols = stage.load.columns
    conflict = ", ".join(q(k) for k in stage.load.key)
    conn.execute(
        f"""INSERT INTO {table_ref(stage.target.name)}
            ({', '.join(q(c) for c in cols)}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)})
        SELECT {', '.join(q(c) for c in cols)}, {ts}, {ts} FROM {q(stage.name)}
        WHERE _change IN ('insert', 'update', 'rewrite')
        ON CONFLICT ({conflict}) DO UPDATE SET {_set_list(stage, _data_columns(stage), ts, 'excluded')}"""
    )
    _touch(conn, stage, ts)


def _data_columns(stage: Stage) -> list[str]:
    return [c for c in stage.load.columns if c not in stage.load.key]


def _set_list(stage: Stage, columns: list[str], ts: str, source: str) -> str:
    sets = [f"{q(c)} = {source}.{q(c)}" for c in columns] + [f"{q(LAST_LOADED_AT)} = {ts}"]
    if stage.target.has_deleted_at:
        sets.append(f"{q(DELETED_AT)} = NULL")
    return ", ".join(sets)


def _update(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...],
            columns: list[str], *, by_rowid: bool = False) -> None:
    conn.execute(
        f"UPDATE {table_ref(stage.target.name)} AS t SET {_set_list(stage, columns, ts, 's')} "
        f"FROM {q(stage.name)} AS s WHERE s._change IN {_in(changes)} AND {_match(stage, by_rowid)}"
    )


def _match(stage: Stage, by_rowid: bool) -> str:
    return "t.rowid = s._rowid" if by_rowid else join_on(stage.load.key, "t", "s")


def _touch(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, *, by_rowid: bool = False) -> None:
    """Rows seen again unchanged: only last_loaded_at moves (a narrow, in-place update)."""
    conn.execute(
        f"UPDATE {table_ref(stage.target.name)} AS t SET {q(LAST_LOADED_AT)} = {ts} "
        f"FROM {q(stage.name)} AS s WHERE s._change = 'same' AND {_match(stage, by_rowid)}"
    )


def _delete(conn: duckdb.DuckDBPyConnection, stage: Stage, changes: tuple[str, ...], *,
            by_rowid: bool = False) -> None:
    conn.execute(
        f"DELETE FROM {table_ref(stage.target.name)} AS t USING {q(stage.name)} AS s "
        f"WHERE s._change IN {_in(changes)} AND {_match(stage, by_rowid)}"
    )


def _insert(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str, changes: tuple[str, ...], *,
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
        f"SELECT {', '.join(values)} FROM {q(stage.name)} WHERE _change IN {_in(changes)}{order}"
    )


def _in(changes: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{c}'" for c in changes) + ")"
