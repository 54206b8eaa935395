"""Building models into DuckDB schema `analytics`, each replaced atomically.

A model is built under a temporary name (`analytics.__build__<model>`), its data tests run against that
build, and only if no error-severity test fails is it swapped in: one transaction drops the old relation and
renames the build. A reader therefore sees the old table or the new one, never a half-built or failing one.
When a model fails (it cannot be rendered or parsed: `Model.problem`, a SQL error, a blocking test) its
previous version stays and only the models downstream of it are skipped, like `dbt build`: every other model
builds.

A build costs what changed: a model whose inputs (inputs.py: its code, the code upstream, the versions of the raw
tables and models it reads, `as_of` if it reads it) are those recorded for its last build in `analytics._builds` is
`unchanged`, not rebuilt, its result carrying the inputs' digest as before (its data version); `full_refresh`
rebuilds every model. An incremental model (`config(materialized='incremental', unique_key=...)`) whose code and
upstream code are its last build's runs its SQL rendered with is_incremental() true and replaces the rows of the
keys it gives (dbt's delete+insert), tested and recorded in one transaction; otherwise it is built whole.

Time-relative figures (certificates expiring in the next 30 days...) read `{{ as_of() }}` (`var('as_of')`), compiled to the
DuckDB variable `as_of` (`getvariable('as_of')`, refs.py) that is set once per build, so every model of a build agrees on "now" and tests can pin it.
Such a model is rebuilt by every build, unless it says until when its result holds: `valid_until` in its config's
`meta` (templating.py), an aggregate over its rows evaluated on each build and recorded with it. A later build
before that instant, whatever else being the same, keeps the model and the `as_of` it was built for; its rows are
those a build then would give, but for that `as_of` column.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

import duckdb

from pipeline.analytics.checks import TestOutcome, run_tests
from pipeline.analytics.comments import comment_statements, execute_together, model_comment_statements
from pipeline.analytics.errors import ModelError
from pipeline.analytics.inputs import NEVER_BUILT, Fingerprint, fingerprint, raw_versions
from pipeline.analytics.lineage import MODEL_SCHEMA
from pipeline.analytics.models import AnalyticsProject, Model
from pipeline.analytics.sql import quote, relation
from pipeline.warehouse import scalar

BUILD_PREFIX = "__build__"
# One row per model: when its current relation was swapped in, for which `as_of`, from which code and inputs.
BUILDS_TABLE = f"{MODEL_SCHEMA}._builds"
BUILDS_DDL = (
    f"CREATE TABLE IF NOT EXISTS {BUILDS_TABLE} (model VARCHAR PRIMARY KEY, materialized VARCHAR NOT NULL, "
    "built_at TIMESTAMPTZ NOT NULL, as_of TIMESTAMPTZ NOT NULL, row_count BIGINT NOT NULL, code_version VARCHAR, "
    "inputs VARCHAR, code_inputs VARCHAR, tested_inputs VARCHAR, valid_until TIMESTAMPTZ)"
)
# Columns added since the table was first declared: a warehouse built before gets them in place (empty: each of
# its models is built once more, then skipped while its inputs stay the same).
BUILDS_MIGRATIONS = (
    *(
        f"ALTER TABLE {BUILDS_TABLE} ADD COLUMN IF NOT EXISTS {column} VARCHAR"
        for column in ("inputs", "code_inputs", "tested_inputs")
    ),
    f"ALTER TABLE {BUILDS_TABLE} ADD COLUMN IF NOT EXISTS valid_until TIMESTAMPTZ",
)
BUILDS_COLUMNS = (
    "model, materialized, built_at, as_of, row_count, code_version, inputs, code_inputs, tested_inputs, valid_until"
)
BUILDS_DESCRIPTION = (
    "One row per model: when its current relation was built, for which as_of, from which code and inputs.",
    {
        "model": "The model.",
        "materialized": "table, view or incremental (in the warehouse).",
        "built_at": "When the build was swapped in (a build that found the inputs unchanged keeps the row).",
        "as_of": "The reference instant of the build (time-relative marts).",
        "row_count": "Rows of the model when built.",
        "code_version": "Digest of the model's SQL and YAML.",
        "inputs": "Digest of everything the build read: its code and the code upstream, the versions of the raw "
        "tables and models it reads, and as_of for a time-relative model; the model's data version.",
        "code_inputs": "Digest of the model's code and of every model's code upstream of it.",
        "tested_inputs": "Digest of inputs and of what the model's relationships tests read: when only it changes, "
        "the tests run again on the model as built.",
        "valid_until": "A time-relative model's first instant at which its result changes with as_of alone "
        "(9999-12-31: none); a build before it keeps the model. NULL: every build rebuilds it.",
    },
)
BuildStatus = Literal["built", "unchanged", "failed", "skipped"]
# A valid_until that gives NULL (no instant changes the rows) is recorded as this: DuckDB's infinity would come back
# to Python as a datetime without a zone.
FOREVER = "TIMESTAMPTZ '9999-12-31 00:00:00+00'"


@dataclass
class ModelResult:
    model: Model
    status: BuildStatus
    rows: int | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)  # (name, DuckDB type)
    seconds: float = 0.0
    outcomes: list[TestOutcome] = field(default_factory=list)
    error: str | None = None
    inputs: str | None = None  # built or unchanged: the digest of its inputs, its data version
    built_at: datetime | None = None  # unchanged: when the build it keeps was swapped in
    replaced: int | None = None  # built incrementally: the rows its incremental SQL gave (each replacing its key's)


@dataclass(frozen=True)
class _Recorded:
    """A model's row of analytics._builds."""

    materialized: str
    built_at: datetime
    row_count: int
    fingerprint: Fingerprint | None  # None: built by dbt, or before inputs were recorded
    as_of: datetime
    valid_until: datetime | None  # its result holds for every as_of before this (None: for its own alone)


def build_models(
    conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    selected: Iterable[str] | None = None,
    as_of: datetime | None = None,
    *,
    full_refresh: bool = False,
) -> Iterator[ModelResult]:
    """Build the selected models (default: all) in dependency order, yielding one result per model. A model whose
    inputs are those of its last build is `unchanged` (not rebuilt), unless `full_refresh`; an incremental model
    whose code and upstream code are its last build's runs its incremental SQL."""
    as_of = as_of or datetime.now(UTC)
    if as_of.tzinfo is None:
        raise ValueError(f"as_of must carry a time zone (got {as_of.isoformat()}); e.g. 2026-11-22T00:00:00Z")
    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(MODEL_SCHEMA)}")
    for statement in (BUILDS_DDL, *BUILDS_MIGRATIONS):
        conn.execute(statement)
    execute_together(conn, comment_statements(BUILDS_TABLE, "TABLE", *BUILDS_DESCRIPTION))
    conn.execute("SET VARIABLE as_of = ?::TIMESTAMPTZ", [as_of])
    names = set(project.models if selected is None else selected)
    recorded = _recorded_builds(conn)
    relations = _relation_kinds(conn)
    raw = raw_versions(conn, project.sources)
    held: dict[str, Fingerprint] = {}  # what the warehouse holds for each model, as digests
    blocked: set[str] = set()
    for model in project.models.values():  # build order
        previous = recorded.get(model.name)
        digested_as_of = _digested_as_of(model, previous, as_of)
        current = fingerprint(model, raw, held, digested_as_of)
        if model.name not in names:
            held[model.name] = _held(model, previous, current, relations)
            continue
        failed_upstream = sorted(d.name for d in model.deps if d.name in blocked and d.schema == MODEL_SCHEMA)
        if failed_upstream:
            blocked.add(model.name)
            held[model.name] = _held(model, previous, current, relations)
            reason = f"model {model.name} skipped: upstream model(s) failed: {', '.join(failed_upstream)}"
            yield ModelResult(model, "skipped", error=reason)
            continue
        if not full_refresh and previous is not None and _unchanged(model, previous, current, relations):
            held[model.name] = current
            result = ModelResult(
                model, "unchanged", previous.row_count, inputs=current.inputs, built_at=previous.built_at
            )
            if previous.fingerprint != current:  # only what its relationships tests read changed
                result = _retest(conn, model, current, result)
            if result.status != "unchanged":
                blocked.add(model.name)
            yield result
            continue
        if digested_as_of != as_of:  # built now: for this as_of, not the last build's
            current = fingerprint(model, raw, held, as_of)
        incremental = not full_refresh and _incremental_applies(model, previous, current, relations)
        result = build_one(conn, model, as_of, current, incremental=incremental)
        if result.status == "built":
            held[model.name] = current
        else:
            blocked.add(model.name)
            held[model.name] = _held(model, previous, current, relations)
        yield result


def models_to_build(conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, as_of: datetime) -> list[str]:
    """The models `build_models` would build or test again now (build order), by the same rule: those whose inputs
    differ from their last build's, or whose tests read something that changed since, each as if it builds. Reads
    only: a warehouse whose models were never built gives every model."""
    try:
        recorded = _recorded_builds(conn)
    except duckdb.CatalogException:  # no build record yet
        return list(project.models)
    relations = _relation_kinds(conn)
    raw = raw_versions(conn, project.sources)
    held: dict[str, Fingerprint] = {}
    work = []
    for model in project.models.values():  # build order
        previous = recorded.get(model.name)
        current = held[model.name] = fingerprint(model, raw, held, _digested_as_of(model, previous, as_of))
        if previous is None or not _unchanged(model, previous, current, relations) or previous.fingerprint != current:
            work.append(model.name)
    return work


def _recorded_builds(conn: duckdb.DuckDBPyConnection) -> dict[str, _Recorded]:
    return {
        model: _Recorded(
            materialized,
            built_at,
            rows,
            Fingerprint(code, inputs, tested or "") if code is not None and inputs is not None else None,
            as_of,
            until,
        )
        for model, materialized, built_at, rows, code, inputs, tested, as_of, until in conn.execute(
            "SELECT model, materialized, built_at, row_count, code_inputs, inputs, tested_inputs, as_of, valid_until "
            f"FROM {BUILDS_TABLE}"
        ).fetchall()
    }


def _digested_as_of(model: Model, previous: _Recorded | None, as_of: datetime) -> datetime:
    """The `as_of` a model's inputs are digested with: its last build's while `as_of` lies between it and the
    instant that build's result changes (valid_until), so that it stays unchanged; else `as_of` (a model that does
    not read it digests none)."""
    if (
        model.valid_until
        and previous is not None
        and previous.valid_until is not None
        and previous.as_of <= as_of < previous.valid_until
    ):
        return previous.as_of
    return as_of


def _relation_kinds(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """TABLE or VIEW, for each relation of schema analytics."""
    return dict(
        conn.execute(
            "SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = $schema UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() "
            "WHERE database_name = current_database() AND schema_name = $schema",
            {"schema": MODEL_SCHEMA},
        ).fetchall()
    )


def _kind(model: Model) -> str:
    return "VIEW" if model.materialized == "view" else "TABLE"


def _unchanged(model: Model, previous: _Recorded, current: Fingerprint, relations: dict[str, str]) -> bool:
    """The warehouse holds a build of the model from the inputs it has now: building again would write the same."""
    return (
        model.problem is None
        and previous.fingerprint is not None
        and (previous.fingerprint.code, previous.fingerprint.inputs) == (current.code, current.inputs)
        and previous.materialized == model.materialized
        and relations.get(model.name) == _kind(model)
    )


def _retest(conn: duckdb.DuckDBPyConnection, model: Model, current: Fingerprint, unchanged: ModelResult) -> ModelResult:
    """The tests of an unchanged model run again on it as built, what they read besides having changed; recorded
    when no blocking test fails (else it fails, and the next build tests it again)."""
    started = time.perf_counter()
    try:
        outcomes = run_tests(conn, model.tests, relation(MODEL_SCHEMA, model.name))
    except duckdb.Error as error:
        return ModelResult(model, "failed", seconds=time.perf_counter() - started, error=_build_error(model, error))
    seconds = time.perf_counter() - started
    if any(o.blocks for o in outcomes):
        return ModelResult(model, "failed", None, [], seconds, outcomes, _blocked_message(model, outcomes))
    conn.execute(f"UPDATE {BUILDS_TABLE} SET tested_inputs = ? WHERE model = ?", [current.tested, model.name])
    return replace(unchanged, seconds=seconds, outcomes=outcomes)


def _incremental_applies(
    model: Model, previous: _Recorded | None, current: Fingerprint, relations: dict[str, str]
) -> bool:
    """An incremental model's table holds a build from the same code, its own and upstream (so only raw rows
    changed since: the change its incremental SQL finds), and the build's instant is none of its inputs."""
    return (
        model.materialized == "incremental"
        and previous is not None
        and previous.materialized == "incremental"
        and previous.fingerprint is not None
        and previous.fingerprint.code == current.code
        and relations.get(model.name) == "TABLE"
        and not (model.time_relative or model.reads_clock)
    )


def _held(model: Model, previous: _Recorded | None, current: Fingerprint, relations: dict[str, str]) -> Fingerprint:
    """The digests of what the warehouse holds for a model not built now (not selected, failed, or skipped): its
    last build's. A view reads the raw tables as they are now, so it holds `current` data under its last build's
    code. Nothing recorded (built by dbt) digests as never seen before, so that what reads it is rebuilt."""
    if model.name not in relations:
        return Fingerprint(NEVER_BUILT, NEVER_BUILT)
    if previous is None or previous.fingerprint is None:
        unknown = f"unrecorded-{uuid.uuid4().hex}"
        return Fingerprint(unknown, unknown)
    if relations[model.name] == "VIEW":
        if previous.fingerprint.code == current.code:
            return current
        return Fingerprint(previous.fingerprint.code, f"{previous.fingerprint.code}-{current.inputs}")
    return previous.fingerprint


@contextmanager
def models_built_ahead(
    conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    selected: Iterable[str] | None = None,
    as_of: datetime | None = None,
    *,
    full_refresh: bool = False,
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
            for result in build_models(conn, project, selected, as_of, full_refresh=full_refresh):
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


def build_one(
    conn: duckdb.DuckDBPyConnection,
    model: Model,
    as_of: datetime,
    inputs: Fingerprint,
    *,
    incremental: bool = False,
) -> ModelResult:
    """Build `model` under its temporary name, test it, and swap it in if no blocking test fails; `incremental`: run
    its incremental SQL and replace the rows of the keys it gives, in the model's table (a full build instead when
    what it gives no longer has the table's columns)."""
    if model.problem is not None:
        return ModelResult(model, "failed", error=f"model {model.name} cannot be built: {model.problem}")
    started = time.perf_counter()
    temp = relation(MODEL_SCHEMA, BUILD_PREFIX + model.name)
    drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)  # left over by a killed build
    kind = _kind(model)
    try:
        if incremental:
            merged = _merge_increment(conn, model, as_of, inputs)
            if merged is not None:
                merged.seconds = time.perf_counter() - started
                return merged
        conn.execute(f"CREATE {kind} {temp} AS\n{model.sql.strip().rstrip(';')}")
        columns = _columns(conn, temp)
        missing = sorted(set(model.columns) - {name for name, _ in columns})
        if missing:
            raise ModelError(
                f"columns {missing} are documented in {model.sql_path.with_suffix('.yml')} but the model "
                f"has no such column; fix the YAML or the SELECT"
            )
        execute_together(conn, model_comment_statements(temp, kind, model, (name for name, _ in columns)))
        outcomes = run_tests(conn, model.tests, temp)
        valid_until = _valid_until(conn, model, temp)
    except (duckdb.Error, ModelError) as error:
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        return ModelResult(model, "failed", seconds=time.perf_counter() - started, error=_build_error(model, error))
    if any(o.blocks for o in outcomes):
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        return ModelResult(
            model, "failed", None, columns, time.perf_counter() - started, outcomes, _blocked_message(model, outcomes)
        )
    rows = int(scalar(conn, f"SELECT count(*) FROM {temp}"))
    swap_in(conn, model, _Build(rows, as_of, inputs, valid_until))
    return ModelResult(model, "built", rows, columns, time.perf_counter() - started, outcomes, inputs=inputs.inputs)


def _merge_increment(
    conn: duckdb.DuckDBPyConnection, model: Model, as_of: datetime, inputs: Fingerprint
) -> ModelResult | None:
    """dbt's delete+insert: the incremental SQL's rows (under the temporary name), then in one transaction the
    table's rows of their keys deleted, the rows inserted, the tests run on the table and the build recorded, or
    everything rolled back when a blocking test fails. None, nothing changed, when the rows' columns are not the
    table's (an upstream model's types changed): the caller builds the model whole."""
    target, temp = relation(MODEL_SCHEMA, model.name), relation(MODEL_SCHEMA, BUILD_PREFIX + model.name)
    conn.execute(f"CREATE TABLE {temp} AS\n{model.incremental_sql.strip().rstrip(';')}")
    columns = _columns(conn, temp)
    if columns != _columns(conn, target):
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        return None
    same_key = " AND ".join(f"t.{quote(k)} IS NOT DISTINCT FROM n.{quote(k)}" for k in model.unique_key)
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(f"DELETE FROM {target} AS t USING {temp} AS n WHERE {same_key}")
        replaced = int(conn.execute(f"INSERT INTO {target} SELECT * FROM {temp}").fetchall()[0][0])
        outcomes = run_tests(conn, model.tests, target)
        if any(o.blocks for o in outcomes):
            conn.execute("ROLLBACK")
            drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
            return ModelResult(model, "failed", None, columns, 0.0, outcomes, _blocked_message(model, outcomes))
        rows = int(scalar(conn, f"SELECT count(*) FROM {target}"))
        _record_build(conn, model, _Build(rows, as_of, inputs))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
        raise
    drop_relation(conn, MODEL_SCHEMA, BUILD_PREFIX + model.name)
    return ModelResult(model, "built", rows, columns, 0.0, outcomes, inputs=inputs.inputs, replaced=replaced)


def _columns(conn: duckdb.DuckDBPyConnection, rel: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in conn.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()]


def _build_error(model: Model, error: BaseException) -> str:
    # DuckDB's messages span lines (the SQL quoted under them): one line, for logs and the run's failure
    return f"model {model.name} failed to build ({model.sql_path}): {' '.join(str(error).split())}"


def _blocked_message(model: Model, outcomes: list[TestOutcome]) -> str:
    failed = "; ".join(o.summary() for o in outcomes if o.blocks)
    return f"model {model.name}: kept the previous build because data tests failed: {failed}"


@dataclass(frozen=True)
class _Build:
    """What analytics._builds records of one build of a model."""

    rows: int
    as_of: datetime
    inputs: Fingerprint
    valid_until: datetime | None = None


def swap_in(conn: duckdb.DuckDBPyConnection, model: Model, build: _Build) -> None:
    """Replace the model's relation by its build, and record the build, in one transaction."""
    conn.execute("BEGIN TRANSACTION")
    try:
        drop_relation(conn, MODEL_SCHEMA, model.name)
        conn.execute(
            f"ALTER {_kind(model)} {relation(MODEL_SCHEMA, BUILD_PREFIX + model.name)} RENAME TO {quote(model.name)}"
        )
        _record_build(conn, model, build)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _valid_until(conn: duckdb.DuckDBPyConnection, model: Model, rel: str) -> datetime | None:
    """The model's `valid_until` over its built rows (FOREVER when it gives NULL: no instant changes them); None
    when it declares none."""
    if not model.valid_until:
        return None
    try:
        until: datetime = conn.execute(
            f"SELECT least(coalesce(({model.valid_until})::TIMESTAMPTZ, {FOREVER}), {FOREVER}) FROM {rel}"
        ).fetchall()[0][0]
    except duckdb.Error as error:
        raise ModelError(
            f"its valid_until ({model.valid_until}) cannot be evaluated over its rows: {' '.join(str(error).split())}; "
            "it must be an aggregate giving a TIMESTAMPTZ, e.g. min(expires_at)"
        ) from error
    return until


def _record_build(conn: duckdb.DuckDBPyConnection, model: Model, build: _Build) -> None:
    inputs = build.inputs
    conn.execute(
        f"INSERT OR REPLACE INTO {BUILDS_TABLE} ({BUILDS_COLUMNS}) VALUES (?, ?, now(), ?, ?, ?, ?, ?, ?, ?)",
        [
            model.name,
            model.materialized,
            build.as_of,
            build.rows,
            model.code_version,
            inputs.inputs,
            inputs.code,
            inputs.tested,
            build.valid_until,
        ],
    )


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
