"""Building models into DuckDB schema `analytics`, each replaced atomically.

A model is built under a temporary name (`analytics.__build__<model>`), its data tests run against that
build, and only if no error-severity test fails is it swapped in: one transaction drops the old relation and
renames the build. A reader therefore sees the old table or the new one, never a half-built or failing one.
When a model fails (it cannot be rendered or parsed: `Model.problem`, a SQL error, a blocking test) its
previous version stays and only the models downstream of it are skipped, like `dbt build`: every other model
builds.

Time-relative figures (certificates expiring in the next 30 days...) read `{{ as_of() }}` (`var('as_of')`), compiled to the
DuckDB variable `as_of` (`getvariable('as_of')`, refs.py) that is set once per build, so every model of a build agrees on "now" and tests can pin it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import duckdb

from pipeline.analytics.checks import TestOutcome, run_tests
from pipeline.analytics.comments import comment_statements, execute_together, model_comment_statements
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA
from pipeline.analytics.models import AnalyticsProject, Model
from pipeline.analytics.sql import quote, relation
from pipeline.warehouse import scalar

BUILD_PREFIX = "__build__"
# One row per model: when its current relation was swapped in, for which `as_of`, and from which code.
BUILDS_TABLE = f"{MODEL_SCHEMA}._builds"
BUILDS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {BUILDS_TABLE} (model VARCHAR PRIMARY KEY, materialized VARCHAR NOT NULL, "
    "built_at TIMESTAMPTZ NOT NULL, as_of TIMESTAMPTZ NOT NULL, row_count BIGINT NOT NULL, code_version VARCHAR)"
)
BUILDS_DESCRIPTION = (
    "One row per model: when its current relation was built, for which as_of, and from which code.",
    {
        "model": "The model.",
        "materialized": "table or view (in the warehouse).",
        "built_at": "When the build was swapped in.",
        "as_of": "The reference instant of the build (time-relative marts).",
        "row_count": "Rows of the model when built.",
        "code_version": "Digest of the model's SQL and YAML.",
    },
)
BuildStatus = Literal["built", "failed", "skipped"]


@dataclass
class ModelResult:
    model: Model
    status: BuildStatus
    rows: int | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, DuckDB type)
    seconds: float = 0.0
    outcomes: list[TestOutcome] = field(default_factory=list)
    error: str | None = None


def build_models(
    conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    selected: Iterable[str] | None = None,
    as_of: datetime | None = None,
) -> Iterator[ModelResult]:
    """Build the selected models (default: all) in dependency order, yielding one result per model."""
    as_of = as_of or datetime.now(UTC)
    if as_of.tzinfo is None:
        raise ValueError(f"as_of must carry a time zone (got {as_of.isoformat()}); e.g. 2026-11-22T00:00:00Z")
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(MODEL_SCHEMA)}")
    conn.execute(BUILDS_DDL)
    execute_together(conn, comment_statements(BUILDS_TABLE, "TABLE", *BUILDS_DESCRIPTION))
    conn.execute("SET VARIABLE as_of = ?::TIMESTAMPTZ", [as_of])
    names = project.models.keys() if selected is None else selected
    blocked: set[str] = set()
    for model in project.in_build_order(names):
        failed_upstream = sorted(d.name for d in model.deps if d.name in blocked and d.schema == MODEL_SCHEMA)
        if failed_upstream:
            blocked.add(model.name)
            reason = f"model {model.name} skipped: upstream model(s) failed: {', '.join(failed_upstream)}"
            yield ModelResult(model, "skipped", error=reason)
            continue
        result = build_one(conn, model, as_of)
        if result.status != "built":
            blocked.add(model.name)
        yield result


@contextmanager
def models_built_ahead(
    conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    selected: Iterable[str] | None = None,
    as_of: datetime | None = None,
) -> Iterator[Iterator[ModelResult]]:
    """`build_models` on a thread of its own, so that DuckDB builds the next model while the caller turns the last
    result into Dagster events (several event-log writes a model, Python that would leave DuckDB idle). Results come in build order; an error of the build is raised where the caller takes the
    next result. Leaving the block early (a failure, the run stopped) interrupts the statement running and waits
    for the thread, so the connection is idle again when the block ends (DuckDB refuses a call on a connection
    busy on another thread)."""
    results: queue.SimpleQueue[ModelResult | BaseException | None] = queue.SimpleQueue()
    stop = threading.Event()

    def build() -> None:
        try:
            for result in build_models(conn, project, selected, as_of):
                results.put(result)
                if stop.is_set():
                    break
        except BaseException as error:  # handed to the caller's thread, raised there
            results.put(error)
        results.put(None)

    def taken() -> Iterator[ModelResult]:
        while (item := results.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
        done.set()

    done = threading.Event()
    builder = threading.Thread(target=build, name="lessonsync-models", daemon=True)
    builder.start()
    try:
        yield taken()
    finally:
        if not done.is_set():  # left before the last result
            stop.set()
            while builder.is_alive():
                conn.interrupt()  # lost if it comes between two statements: repeated until the thread ends
                builder.join(timeout=0.1)
        builder.join()


def build_one(conn: duckdb.DuckDBPyConnection, model: Model, as_of: datetime) -> ModelResult:
    """Build `model` under its temporary name, test it, and swap it in if no blocking test fails."""
    if model.problem is not None:
        return ModelResult(model, "failed", error=f"model {model.name} cannot be built: {model.problem}")
    started = time.perf_counter()
    temp = relation(MODEL_SCHEMA, BUILD_PREFIX + model.name)
    drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)  # left over by a killed build
    kind = "VIEW" if model.materialized == "view" else "TABLE"
    try:
        conn.execute(f"CREATE {kind} {temp} AS\n{model.sql.strip().rstrip(';')}")
        columns = [(r[0], r[1]) for r in conn.execute(f"DESCRIBE SELECT * FROM {temp}").fetchall()]
        missing = sorted(set(model.columns) - {name for name, _ in columns})
        if missing:
            raise ModelError(
                f"columns {missing} are documented in {model.sql_path.with_suffix('.yml')} but the model "
                f"has no such column; fix the YAML or the SELECT"
            )
        execute_together(conn, model_comment_statements(temp, kind, model, (name for name, _ in columns)))
        outcomes = run_tests(conn, model.tests, temp)
    except (duckdb.Error, ModelError) as error:
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        # DuckDB's messages span lines (the SQL quoted under them): one line, for logs and the run's failure
        message = f"model {model.name} failed to build ({model.sql_path}): {' '.join(str(error).split())}"
        return ModelResult(model, "failed", seconds=time.perf_counter() - started, error=message)
    if any(o.blocks for o in outcomes):
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        failed = "; ".join(o.summary() for o in outcomes if o.blocks)
        message = f"model {model.name}: kept the previous build because data tests failed: {failed}"
        return ModelResult(model, "failed", None, columns, time.perf_counter() - started, outcomes, message)
    rows = int(scalar(conn, f"SELECT count(*) FROM {temp}"))
    swap_in(conn, model, rows, as_of)
    return ModelResult(model, "built", rows, columns, time.perf_counter() - started, outcomes)


def swap_in(conn: duckdb.DuckDBPyConnection, model: Model, rows: int, as_of: datetime) -> None:
    """Replace the model's relation by its build, and record the build, in one transaction."""
    kind = "VIEW" if model.materialized == "view" else "TABLE"
    conn.execute("BEGIN TRANSACTION")
    try:
        drop_relation(conn, MODEL_SCHEMA, model.name)
        conn.execute(f"ALTER {kind} {relation(MODEL_SCHEMA, BUILD_PREFIX + model.name)} RENAME TO {quote(model.name)}")
        conn.execute(
            f"INSERT OR REPLACE INTO {BUILDS_TABLE} VALUES (?, ?, now(), ?, ?, ?)",
            [model.name, model.materialized, as_of, rows, model.code_version],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def drop_relation(conn: duckdb.DuckDBPyConnection, schema: str, name: str) -> None:
    """Drop a table or view by name, whichever it is (a model may change materialization)."""
    kinds = conn.execute(
        "SELECT 'TABLE' FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND table_name = ? UNION ALL SELECT 'VIEW' FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = ? AND view_name = ?",
        [schema, name, schema, name],
    ).fetchall()
    for (kind,) in kinds:
        conn.execute(f"DROP {kind} {relation(schema, name)}")
