"""Analyst models (dbt_like_sql/) as Dagster assets, dagster-dbt style.

Every model is its own asset `analytics/<model>` (group `analytics`), with upstream dependencies read from
its SQL, so the graph shows lms/* -> staging -> marts. All models run in ONE step (a subsettable
multi-asset): one DuckDB connection, in dependency order, instead of a process per model. Their YAML tests
are asset checks of that step; an error-severity check that fails keeps the previous table and skips what
is downstream of it. `analytics/published` then writes what analysts read while syncs run.

Usage in definitions: `Definitions(assets=[..., *analytics_assets], asset_checks=[..., *analytics_checks])`
with the `WarehouseResource` under the resource key `warehouse`.
"""

# No `from __future__ import annotations`: Dagster reads the Config and resource annotations at runtime.
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
    asset,
    asset_check,
    multi_asset,
)
from pydantic import Field

from pipeline.analytics.build import ModelResult, build_models
from pipeline.analytics.checks import TestOutcome
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, TableRef
from pipeline.analytics.models import Model, load_project
from pipeline.analytics.publish import publish
from pipeline.analytics.verify import verify_published
from pipeline.resources import WarehouseResource

GROUP = "analytics"
AS_OF_ENV = "LESSONSYNC_ANALYTICS_AS_OF"  # default `as_of` when the run config gives none (e.g. the demo's clock)
POOL = "warehouse"
PUBLISHED_KEY = AssetKey([MODEL_SCHEMA, "published"])

PROJECT = load_project()  # files only; a broken model fails the code location's load, naming file and table
if "published" in PROJECT.models:
    raise ModelError(f"{PROJECT.models['published'].sql_path}: the model name 'published' is reserved; rename it")


class AnalyticsBuildConfig(Config):
    as_of: str | None = Field(
        None,
        description="Reference instant of time-relative figures (certificates expiring within 30 days...), "
        f"ISO 8601 with a time zone, e.g. 2026-11-22T00:00:00Z. Default: ${AS_OF_ENV}, else when the run starts.",
    )


def _key(ref: TableRef | Model) -> AssetKey:
    return AssetKey([ref.schema, ref.name]) if isinstance(ref, TableRef) else AssetKey([MODEL_SCHEMA, ref.name])


def _spec(model: Model) -> AssetSpec:
    columns = [TableColumn(name, description=text or None) for name, text in model.columns.items()]
    return AssetSpec(
        key=_key(model),
        deps=[_key(d) for d in model.deps],
        description=model.description or None,
        group_name=GROUP,
        kinds={"duckdb"},
        code_version=model.code_version,
        tags={"layer": model.layer or "models"},
        metadata={
            "dagster/table_name": f"{MODEL_SCHEMA}.{model.name}",
            "dagster/column_schema": TableSchema(columns=columns),
            "sql": MetadataValue.path(str(model.sql_path.relative_to(PROJECT.root.parent))),
            "materialized": model.materialized,
        },
    )


def _check_specs(model: Model) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            test.name,
            asset=_key(model),
            description=f"{test.description} ({test.severity})",
            blocking=test.severity == "error",
            additional_deps=[_key(test.to)] if test.to and test.to.name != model.name else None,
        )
        for test in model.tests
    ]


def _parse_as_of(text: str | None) -> datetime:
    text = text or os.environ.get(AS_OF_ENV)
    if not text:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise Failure(f"as_of {text!r} is not an ISO 8601 instant; use e.g. 2026-11-22T00:00:00Z") from None
    if value.tzinfo is None:
        raise Failure(f"as_of {text!r} has no time zone; add one, e.g. {text}Z")
    return value


@multi_asset(
    name="analytics_models",
    specs=[_spec(m) for m in PROJECT.models.values()],
    check_specs=[spec for m in PROJECT.models.values() for spec in _check_specs(m)],
    can_subset=True,
    pool=POOL,
    description="Builds the selected dbt_like_sql models into DuckDB schema `analytics`, in dependency order.",
)
def analytics_models(
    context: AssetExecutionContext, config: AnalyticsBuildConfig, warehouse: WarehouseResource
) -> Iterator[MaterializeResult | AssetCheckResult]:
    selected = {key.path[-1] for key in context.selected_asset_keys}
    as_of = _parse_as_of(config.as_of)
    failures: list[str] = []
    with warehouse.connect() as conn:
        for result in build_models(conn, PROJECT, selected, as_of):
            context.log.info(_log_line(result))
            yield from _check_results(context, result.outcomes)
            if result.status == "built":
                yield _materialization(result, as_of)
            else:
                failures.append(result.error or result.model.name)
    if failures:
        raise Failure(
            description=f"{len(failures)} analytics model(s) not rebuilt (previous tables kept): " + " | ".join(failures)
        )


def _log_line(result: ModelResult) -> str:
    if result.status == "built":
        return f"{result.model.name}: {result.rows} rows ({result.model.materialized}) in {result.seconds:.2f}s"
    return f"{result.model.name}: {result.status}: {result.error}"


def _check_results(context: AssetExecutionContext, outcomes: list[TestOutcome]) -> Iterator[AssetCheckResult]:
    selected = context.selected_asset_check_keys
    for outcome in outcomes:
        key = _key(PROJECT.models[outcome.test.model])
        if not any(k.asset_key == key and k.name == outcome.test.name for k in selected):
            continue
        yield AssetCheckResult(
            asset_key=key,
            check_name=outcome.test.name,
            passed=outcome.passed,
            severity=AssetCheckSeverity.ERROR if outcome.test.severity == "error" else AssetCheckSeverity.WARN,
            description=outcome.summary(),
            metadata={"failing_rows": outcome.failing_rows, "sample": MetadataValue.json(_jsonable(outcome.sample))},
        )


def _jsonable(values: list) -> list:
    return [v if isinstance(v, (str, int, float, bool, type(None))) else str(v) for v in values]


def _materialization(result: ModelResult, as_of: datetime) -> MaterializeResult:
    return MaterializeResult(
        asset_key=_key(result.model),
        metadata={
            "dagster/row_count": result.rows or 0,
            "dagster/column_schema": TableSchema(columns=[
                TableColumn(name, type_, description=result.model.columns.get(name) or None)
                for name, type_ in result.columns
            ]),
            "seconds": round(result.seconds, 3),
            "as_of": as_of.isoformat(),
        },
    )


@asset(
    key=PUBLISHED_KEY,
    deps=[_key(m) for m in PROJECT.models.values()],
    group_name=GROUP,
    kinds={"duckdb", "parquet"},
    pool=POOL,
    description="What analysts query while syncs run: data/analytics.duckdb (every model, read-only copy, "
    "swapped atomically) and data/marts/<mart>.parquet.",
)
def analytics_published(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    with warehouse.connect() as conn:
        result = publish(conn, PROJECT, Path(warehouse.data_dir))
    context.log.info(f"published {len(result.rows)} tables and {len(result.parquet)} marts in {result.seconds:.2f}s")
    return MaterializeResult(
        metadata={
            "snapshot": MetadataValue.path(str(result.snapshot)),
            "snapshot_bytes": result.snapshot.stat().st_size,
            "marts": MetadataValue.json({m: str(p) for m, p in result.parquet.items()}),
            "rows": MetadataValue.json(result.rows),
            "published_at": result.published_at.isoformat(),
            "seconds": round(result.seconds, 3),
        }
    )


@asset_check(
    asset=PUBLISHED_KEY,
    name="published_files_consistent",
    description="data/analytics.duckdb opens read-only with every model, and every mart's Parquet file is "
    "readable with the row count of the manifest. Reads only the published files: runs even during a sync.",
)
def published_files_check(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> AssetCheckResult:
    problems, rows = verify_published(PROJECT, Path(warehouse.data_dir))
    return AssetCheckResult(
        passed=not problems,
        description="; ".join(problems) or "snapshot and Parquet files agree",
        metadata={"problems": len(problems), "rows": MetadataValue.json(rows)},
    )


analytics_assets = [analytics_models, analytics_published]
analytics_checks = [published_files_check]
