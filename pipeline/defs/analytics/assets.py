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

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
    multi_asset,
)
from pydantic import Field

from pipeline.analytics.build import build_models
from pipeline.analytics.dagster_specs import (
    GROUP, asset_key, asset_spec, check_results, check_specs, log_line, materialization,
)
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA
from pipeline.analytics.models import load_project
from pipeline.analytics.publish import publish
from pipeline.analytics.verify import verify_published
from pipeline.assets.common import OWNERS, POOL
from pipeline.resources import WarehouseResource
from pipeline.settings import load_settings

AS_OF_ENV = "LESSONSYNC_ANALYTICS_AS_OF"  # default `as_of` when the run config gives none (e.g. the demo's clock)
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


def _parse_as_of(text: str | None) -> datetime:
    text = text or load_settings().analytics_as_of
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
    specs=[asset_spec(m, PROJECT.root.parent, OWNERS) for m in PROJECT.models.values()],
    check_specs=[spec for m in PROJECT.models.values() for spec in check_specs(m)],
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
            context.log.info(log_line(result))
            yield from check_results(result.outcomes, set(context.selected_asset_check_keys))
            if result.status == "built":
                yield materialization(result, as_of)
            else:
                failures.append(result.error or result.model.name)
    if failures:
        raise Failure(
            description=f"{len(failures)} analytics model(s) not rebuilt (previous tables kept): " + " | ".join(failures)
        )


@asset(
    key=PUBLISHED_KEY,
    deps=[asset_key(m) for m in PROJECT.published],
    group_name=GROUP,
    kinds={"duckdb", "parquet"},
    owners=OWNERS,
    pool=POOL,
    description="What analysts query while syncs run: data/analytics.duckdb (a copy of every published model, "
    "swapped atomically; open it read-only) and data/marts/<mart>.parquet.",
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
