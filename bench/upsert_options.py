"""Upsert strategies of the warehouse, measured through the real commit path (lake parts -> staging ->
upsert, one transaction), on two table shapes:

  answers   like lms.answers: composite 4-column key, scalar and JSON columns, no list column.
  sessions  like lms.lesson_sessions: one key column and a VARCHAR[] column that every update changes.

First a load of --batch-rows rows into an empty table: no strategy takes part in it (a first load is one
INSERT, pipeline/warehouse/merge/upsert.py insert_first_load), so it is measured once. Then, for each
strategy, --batch-rows rows (--new-fraction new keys, the rest updates of existing keys in random order) into a
table of --target-rows rows. Every strategy must leave the same table (checked by digest) with the same counts.

    .venv/bin/python bench/upsert_options.py                       # 1M into empty; 1M into 10M (answers)
    .venv/bin/python bench/upsert_options.py --target-rows 1000000 --batch-rows 100000 --shape sessions
    .venv/bin/python bench/upsert_options.py --quick               # small sizes, a smoke run

The product ships one strategy (pipeline/warehouse/merge/upsert.py: rows matched by the row id staging recorded);
the ones that lost live here, built from the product's statements, and are passed to the real commit path
through Warehouse(upsert=...). `INSERT ... ON CONFLICT` is gone with the tables' primary keys (it needs a
unique index). DuckDB issues #11275 (updates slow unless sorted by key) and #21925 (INSERT OR REPLACE ... BY
NAME slow since 1.4.3) are why the strategies differ; see docs/warehouse.md for the numbers and the choice."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import psutil
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.contract.tables import TableSpec  # noqa: E402
from pipeline.warehouse import Warehouse  # noqa: E402
from pipeline.warehouse.duck.arrow_types import q  # noqa: E402
from pipeline.warehouse.duck.schema import FIRST_LOADED_AT, LAST_LOADED_AT, table_ref  # noqa: E402
from pipeline.warehouse.merge.context import Upsert  # noqa: E402
from pipeline.warehouse.merge.staging import Stage, join_on  # noqa: E402
from pipeline.warehouse.merge.upsert import (  # noqa: E402
    data_columns,
    delete_rows,
    insert_rows,
    set_list,
    update_rows,
    upsert_stage,
)

TS = pa.timestamp("us", tz="UTC")
STARTED = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
PRIME = 7919  # coprime with every --target-rows used here: (j * PRIME) % n visits distinct keys in random order

ANSWERS = TableSpec(
    "answers",
    pa.schema(
        [
            pa.field("active_lesson_id", pa.string(), nullable=False),
            pa.field("quiz_type", pa.string(), nullable=False),
            pa.field("attempt_index", pa.float64(), nullable=False),
            pa.field("question_id", pa.string(), nullable=False),
            pa.field("user_id", pa.string()),
            pa.field("lesson_id", pa.string()),
            pa.field("question_title", pa.string()),
            pa.field("lesson_version", pa.float64()),
            pa.field("is_valid", pa.bool_()),
            pa.field("validation", pa.string(), metadata={b"json": b"1"}),
            pa.field("last_date", TS),
        ]
    ),
    ("active_lesson_id", "quiz_type", "attempt_index", "question_id"),
    "incremental",
    "last_date",
)

SESSIONS = TableSpec(
    "lesson_sessions",
    pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("title", pa.string()),
            pa.field("presenters", pa.list_(pa.string())),
            pa.field("status", pa.string()),
            pa.field("start_date", TS),
        ]
    ),
    ("id",),
    "snapshot",
)


def answers_sql(keys: str, version: int) -> str:
    """Answer rows for key numbers `i` produced by `keys`; version 2 changes validity, JSON and last_date."""
    return f"""
        SELECT substr(md5((i // 8)::VARCHAR), 1, 24) AS active_lesson_id,
               CASE WHEN i % 2 = 0 THEN 'exit' ELSE 'entry' END AS quiz_type,
               ((i // 2) % 2)::DOUBLE AS attempt_index, 'q' || ((i // 4) % 2) AS question_id,
               'user-' || (i % 50000) AS user_id, 'lesson-' || (i % 700) AS lesson_id,
               'How many sides has shape number ' || (i % 1000) AS question_title, 1.0 AS lesson_version,
               {"NOT " if version == 2 else ""}(i % 3 = 0) AS is_valid,
               '{{"feedback": {{"status": "' || CASE WHEN {version} = 2 THEN 'valid' ELSE 'pending' END || '"}}}}'
                   AS validation,
               TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_seconds(i % 86400) + to_days({version}) AS last_date
        FROM ({keys})"""


def sessions_sql(keys: str, version: int) -> str:
    return f"""
        SELECT substr(md5(i::VARCHAR), 1, 24) AS id, 'Session ' || i AS title,
               ['presenter-' || (i % 300), 'presenter-' || ((i + {version}) % 300)] AS presenters,
               'online' AS status, TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_hours(i % 5000) AS start_date
        FROM ({keys})"""


def by_key(stage: Stage) -> str:
    return join_on(stage.load.key, "t", "s")


def update_insert(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """UPDATE ... FROM by a join on the key for every changed row, INSERT for new keys."""
    update_rows(conn, stage, ts, ("update", "rewrite"), data_columns(stage), by_key(stage))
    insert_rows(conn, stage, ts, ("insert",), sort=False)


def delete_insert(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """DELETE every changed key (key join), then INSERT changed and new rows sorted by key."""
    delete_rows(conn, stage, ("update", "rewrite"), by_key(stage))
    insert_rows(conn, stage, ts, ("insert", "update", "rewrite"), sort=True)


def merge(conn: duckdb.DuckDBPyConnection, stage: Stage, ts: str) -> None:
    """One MERGE INTO on the key."""
    cols = stage.load.columns
    conn.execute(
        f"""MERGE INTO {table_ref(stage.target.name)} AS t
        USING (SELECT * FROM {q(stage.name)} WHERE _change <> 'stale') AS s ON {by_key(stage)}
        WHEN MATCHED AND s._change = 'same' THEN DO NOTHING
        WHEN MATCHED THEN UPDATE SET {set_list(stage, data_columns(stage), ts, "s")}
        WHEN NOT MATCHED THEN INSERT ({", ".join(q(c) for c in cols)}, {q(FIRST_LOADED_AT)}, {q(LAST_LOADED_AT)})
            VALUES ({", ".join("s." + q(c) for c in cols)}, {ts}, {ts})"""
    )


# "product": what the warehouse ships (pipeline.warehouse.merge.upsert.upsert_stage); the others lost (docs/warehouse.md)
STRATEGIES: dict[str, Upsert] = {
    "product": upsert_stage,
    "update_insert": update_insert,
    "merge": merge,
    "delete_insert": delete_insert,
}


def strategy(name: str) -> Upsert:
    if name not in STRATEGIES:
        raise ValueError(f"unknown upsert strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


@dataclass(frozen=True)
class Shape:
    spec: TableSpec
    sql: Callable[[str, int], str]


SHAPES = {"answers": Shape(ANSWERS, answers_sql), "sessions": Shape(SESSIONS, sessions_sql)}


def first_keys(n: int) -> str:
    return f"SELECT range AS i FROM range({n})"


def batch_keys(target: int, batch: int, new_fraction: float) -> str:
    updates = batch - int(batch * new_fraction)
    return (
        f"SELECT (j * {PRIME}) % {target} AS i FROM range({updates}) AS t(j) "
        f"UNION ALL SELECT range AS i FROM range({target}, {target + batch - updates})"
    )


@dataclass
class Timing:
    write_s: float  # batches -> lake parts
    commit_s: float  # wall seconds of load.commit()
    commit_cpu_s: float  # CPU seconds of this process (all DuckDB threads) during the commit
    counts: dict[str, int]


def load(wh: Warehouse, shape: Shape, sql: str, run_id: str) -> Timing:
    """Write the rows to the lake, then commit them; wall and CPU time (the CPU time does not depend on
    what else runs on the machine), and the counts."""
    started = time.perf_counter()
    with wh.load(shape.spec.name, run_id, STARTED) as current:
        for piece in duckdb.sql(sql).to_arrow_reader(200_000):
            current.write(shape.spec, piece.cast(shape.spec.schema))
        written, cpu = time.perf_counter(), _cpu()
        result = current.commit(complete_snapshots=())
    return Timing(
        written - started, time.perf_counter() - written, _cpu() - cpu, result.tables[shape.spec.name].as_dict()
    )


def _cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def table_digest(wh: Warehouse, spec: TableSpec) -> tuple[int, int]:
    columns = ", ".join(f'"{c}"' for c in spec.schema.names)
    with wh.connect(read_only=True) as conn:
        return conn.execute(
            f"SELECT count(*), sum(hash(t)::HUGEINT) FROM (SELECT {columns} FROM lms.{spec.name}) t"
        ).fetchone()


def warehouse(root: Path, strategy: str, args: argparse.Namespace) -> Warehouse:
    return Warehouse(
        root / "warehouse.duckdb",
        root / "lake",
        upsert=STRATEGIES[strategy],
        memory_limit=args.memory_limit,
        threads=args.threads,
    )


def run(args: argparse.Namespace) -> dict[str, object]:
    shape = SHAPES[args.shape]
    first = shape.sql(first_keys(args.batch_rows), 1)
    batch = shape.sql(batch_keys(args.target_rows, args.batch_rows, args.new_fraction), 2)
    work = Path(tempfile.mkdtemp(prefix="upsert-bench-", dir=args.work_dir))
    results: dict[str, object] = {
        "load_average_at_start": os.getloadavg(),
        "shape": args.shape,
        "target_rows": args.target_rows,
        "batch_rows": args.batch_rows,
        "new_fraction": args.new_fraction,
        "duckdb": duckdb.__version__,
        "memory_limit": args.memory_limit,
        "upsert": {},
    }
    try:
        base = work / "base"
        built = load(warehouse(base, "product", args), shape, shape.sql(first_keys(args.target_rows), 1), "base")
        results["base_build"] = {"rows": args.target_rows, **vars(built)}
        print(
            f"base table: {args.target_rows:,} rows written in {built.write_s:.1f} s, committed in "
            f"{built.commit_s:.1f} s ({built.commit_cpu_s:.1f} CPU s)"
        )
        fresh = warehouse(work / "first", "product", args)
        results["first_load"] = _measure(
            "first load", "(no strategy)", args.batch_rows, lambda: load(fresh, shape, first, "first")
        )
        shutil.rmtree(work / "first")
        digests = {}
        for strategy in args.strategies:
            copy = work / f"upsert-{strategy}"
            shutil.copytree(base, copy)
            target = warehouse(copy, strategy, args)
            results["upsert"][strategy] = _measure(  # type: ignore[index]
                "upsert", strategy, args.batch_rows, lambda wh=target: load(wh, shape, batch, "batch")
            )
            if "error" not in results["upsert"][strategy]:  # type: ignore[index]
                digests[strategy] = table_digest(target, shape.spec)
            shutil.rmtree(copy)
        results["same_table_for_every_strategy"] = len(set(digests.values())) == 1
        results["peak_rss_mib"] = psutil.Process().memory_info().rss / 2**20
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _measure(what: str, strategy: str, rows: int, run_load: Callable[[], Timing]) -> dict[str, object]:
    try:
        timing = run_load()
    except duckdb.Error as error:  # e.g. out of memory: a result too
        print(f"{what:11s} {strategy:14s} FAILED: {str(error).splitlines()[0]}")
        return {"error": str(error).splitlines()[0]}
    print(
        f"{what:11s} {strategy:14s} {timing.commit_s:8.2f} s {timing.commit_cpu_s:8.2f} CPU s "
        f"{rows / timing.commit_s:12,.0f} rows/s  {timing.counts}"
    )
    return {
        "seconds": round(timing.commit_s, 3),
        "cpu_seconds": round(timing.commit_cpu_s, 3),
        "rows_per_s": round(rows / timing.commit_s),
        "counts": timing.counts,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="answers")
    parser.add_argument("--target-rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=1_000_000)
    parser.add_argument("--new-fraction", type=float, default=0.1)
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the temporary warehouses go")
    parser.add_argument("--out", type=Path, default=Path("bench/results/upsert_options.json"))
    parser.add_argument("--quick", action="store_true", help="200k-row table, 20k-row batch")
    args = parser.parse_args()
    if args.quick:
        args.target_rows, args.batch_rows = 200_000, 20_000
    results = run(args)
    print("every strategy left the same table:", results["same_table_for_every_strategy"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*runs, results], indent=1))
    return 0 if results["same_table_for_every_strategy"] else 1


if __name__ == "__main__":
    sys.exit(main())
