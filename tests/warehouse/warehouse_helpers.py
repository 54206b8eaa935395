"""Shared pieces of the warehouse tests: realistic TableSpecs (tz timestamps, lists of strings, JSON text,
nullable fields, child tables), batch builders, and readers that dump a table for exact comparison."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipeline.contract.tables import TableSpec
from pipeline.warehouse import Load, Warehouse
from pipeline.warehouse.loading.early_insert import EarlyFirstLoad

UTC = UTC
TS = pa.timestamp("us", tz="UTC")
JSON = {b"json": b"1"}
T0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)

ANSWER_KEY = ("active_lesson_id", "question_id", "attempt_index")
ANSWERS = TableSpec(
    name="answers",
    schema=pa.schema(
        [
            pa.field("active_lesson_id", pa.string(), nullable=False),
            pa.field("question_id", pa.string(), nullable=False),
            pa.field("attempt_index", pa.float64(), nullable=False),
            pa.field("user_id", pa.string()),
            pa.field("lesson_id", pa.string()),
            pa.field("is_valid", pa.bool_()),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("validation", pa.string(), metadata=JSON),
            pa.field("last_date", TS),
        ]
    ),
    key=ANSWER_KEY,
    kind="incremental",
    cursor_field="last_date",
    description="One answer to one question.",
)
ANSWER_RESULTS = TableSpec(
    name="answer_results",
    schema=pa.schema(
        [
            *(pa.field(k, ANSWERS.schema.field(k).type, nullable=False) for k in ANSWER_KEY),
            pa.field("result_index", pa.int64(), nullable=False),
            pa.field("value", pa.string()),
        ]
    ),
    key=(*ANSWER_KEY, "result_index"),
    kind="incremental",
    parent="answers",
    description="Results of an answer.",
)
ACTIVE_LESSONS = TableSpec(
    name="active_lessons",
    schema=pa.schema(
        [
            pa.field("user_id", pa.string(), nullable=False),
            pa.field("lesson_id", pa.string(), nullable=False),
            pa.field("score", pa.float64()),
            pa.field("last_date", TS),
        ]
    ),
    key=("user_id", "lesson_id"),
    kind="incremental",
    cursor_field="last_date",
)
GROUPS = TableSpec(
    name="groups",
    schema=pa.schema(
        [pa.field("id", pa.string(), nullable=False), pa.field("title", pa.string()), pa.field("disabled", pa.bool_())]
    ),
    key=("id",),
    kind="snapshot",
    description="User groups.",
)
SESSIONS = TableSpec(
    name="lesson_sessions",
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("title", pa.string()),
            pa.field("presenters", pa.list_(pa.string())),
            pa.field("start_date", TS),
        ]
    ),
    key=("id",),
    kind="snapshot",
)
REGISTRATIONS = TableSpec(
    name="lesson_session_registrations",
    schema=pa.schema(
        [
            pa.field("session_id", pa.string(), nullable=False),
            pa.field("user_id", pa.string(), nullable=False),
            pa.field("status", pa.string()),
        ]
    ),
    key=("session_id", "user_id"),
    kind="snapshot",
    parent="lesson_sessions",
)
QUARANTINE = TableSpec(
    name="quarantine",
    schema=pa.schema(
        [
            pa.field("seen_at", TS, nullable=False),
            pa.field("stream", pa.string()),
            pa.field("raw", pa.string(), metadata=JSON),
        ]
    ),
    key=(),
    kind="append",
)
ALL_SPECS = (ANSWERS, ANSWER_RESULTS, ACTIVE_LESSONS, GROUPS, SESSIONS, REGISTRATIONS, QUARANTINE)


def batch(spec: TableSpec, rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """A record batch of `spec` from row dicts (missing fields are null)."""
    columns = {name: [row.get(name) for row in rows] for name in spec.schema.names}
    return pa.RecordBatch.from_pydict(columns, schema=spec.schema)


def answer(
    al: str,
    q: str,
    attempt: float = 0,
    *,
    minutes: int = 0,
    valid: bool | None = True,
    tags: list[str] | None = None,
    validation: str | None = None,
    user: str = "u1",
) -> dict[str, Any]:
    return {
        "active_lesson_id": al,
        "question_id": q,
        "attempt_index": attempt,
        "user_id": user,
        "lesson_id": "l1",
        "is_valid": valid,
        "tags": tags,
        "validation": validation,
        "last_date": T0 + timedelta(minutes=minutes),
    }


def result(al: str, q: str, index: int, value: str, attempt: float = 0) -> dict[str, Any]:
    return {"active_lesson_id": al, "question_id": q, "attempt_index": attempt, "result_index": index, "value": value}


def stepping_clock(start: datetime = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)) -> Callable[[], datetime]:
    """A clock that moves one second per reading, so load times are distinct and predictable."""
    ticks = itertools.count()
    return lambda: start + timedelta(seconds=next(ticks))


def make_warehouse(root: Path, **options: Any) -> Warehouse:
    options.setdefault("clock", stepping_clock())
    options.setdefault("memory_limit", "512MB")
    options.setdefault("threads", 2)
    options.setdefault("lock_timeout", 0.0)
    return Warehouse(root / "warehouse.duckdb", root / "lake", **options)


def rows(conn: duckdb.DuckDBPyConnection, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    """Every row of lms.<table>, all columns, in a stable order."""
    return conn.execute(f'SELECT {columns} FROM lms."{table}" ORDER BY ALL').fetchall()


def dump(wh: Warehouse, tables: tuple[str, ...] | None = None) -> dict[str, list[tuple[Any, ...]]]:
    with wh.connect(read_only=True) as conn:
        names = tables or tuple(
            n
            for (n,) in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'lms' ORDER BY 1"
            ).fetchall()
        )
        return {name: rows(conn, name) for name in names}


def digest(conn: duckdb.DuckDBPyConnection, sql_from: str, columns: str = "*") -> tuple[int, int]:
    """(rows, order-independent hash of every row) of a query: compares big tables without fetching them."""
    return conn.execute(
        f"SELECT count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM (SELECT {columns} FROM {sql_from}) AS t"
    ).fetchone()


def digest_all(path: Path) -> dict[str, tuple[int, int]]:
    """A digest of every table of schema lms, all columns (load metadata and internal tables included)."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        names = [
            n
            for (n,) in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'lms' ORDER BY 1"
            ).fetchall()
        ]
        return {name: digest(conn, f'lms."{name}"') for name in names}
    finally:
        conn.close()


def load_once(
    wh: Warehouse,
    stream: str,
    tables: list[tuple[TableSpec, list[dict[str, Any]]]],
    *,
    run_id: str = "run",
    cursor: datetime | None = None,
    **commit: Any,
) -> Any:
    with wh.load(stream, run_id, T0) as load:
        for spec, table_rows in tables:
            load.write(spec, batch(spec, table_rows))
        return load.commit(cursor=cursor, **commit)


def generated(spec: TableSpec, sql: str) -> pa.Table:
    """Rows made by DuckDB (fast for many rows, and no pandas import in short-lived subprocesses)."""
    return duckdb.sql(sql).to_arrow_table().cast(spec.schema)


def answers_generation(generation: int, rows_count: int) -> tuple[pa.Table, pa.Table]:
    """Answers and their results. Generation 2 changes a third of generation 1's upper half (validity,
    lists, cursor), shrinks their results to one, leaves the lower half alone and adds new answers."""
    start, stop = (0, rows_count) if generation == 1 else (rows_count // 2, rows_count + rows_count // 5)
    changed = f"({generation} = 2 AND i % 3 = 0)"
    answers = generated(
        ANSWERS,
        f"""
        SELECT 'al' || (i // 4) AS active_lesson_id, 'q' || (i % 4) AS question_id, 0.0 AS attempt_index,
               'u' || (i % 97) AS user_id, 'l' || (i % 13) AS lesson_id, NOT {changed} AS is_valid,
               CASE WHEN {changed} AND i % 2 = 0 THEN ['x', 'y'] WHEN i % 2 = 0 THEN ['x'] END AS tags,
               CASE WHEN i % 7 = 0 THEN '{{"status": "pending"}}' END AS validation,
               TIMESTAMPTZ '2026-11-01 08:00:00+00' + to_minutes(CASE WHEN {changed} THEN 60 ELSE 0 END) AS last_date
        FROM range({start}, {stop}) AS t(i)""",
    )
    results = generated(
        ANSWER_RESULTS,
        f"""
        SELECT 'al' || (i // 4) AS active_lesson_id, 'q' || (i % 4) AS question_id, 0.0 AS attempt_index,
               r AS result_index, 'v' || i || '-' || r AS value
        FROM range({start}, {stop}) AS t(i), range(2) AS s(r) WHERE r = 0 OR NOT {changed}""",
    )
    return answers, results


def write_in_slices(
    load: Load, spec: TableSpec, table: pa.Table, early: EarlyFirstLoad | None, rows: int = 700
) -> None:
    """`table` written to `load` `rows` at a time, each slice followed by the early inserts' look for closed parts
    (early_insert.py, as its thread does), and once more when every part the rows fill is closed."""
    for start in range(0, table.num_rows, rows):
        load.write(spec, table.slice(start, rows))
        if early is not None:
            early.insert_ready()
    wait_for_parts(load, spec.name, table.num_rows // load.part_rows)
    if early is not None:
        early.insert_ready()


def wait_for_parts(load: Load, table: str, count: int) -> None:
    """Until `count` parts of `table` are closed: they are published in the background (lake.PartWriter)."""
    deadline = time.monotonic() + 30
    while len(load.closed_parts(table)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
