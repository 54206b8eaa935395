"""Analyst models (dbt_like_sql/) as Dagster assets, dagster-dbt style.

Every model is its own asset `analytics/<model>` (group `analytics`), with upstream dependencies read from
its SQL, so the graph shows lms/* -> staging -> marts. All models run in ONE step (a subsettable
multi-asset): one DuckDB connection, in dependency order, instead of a process per model. Their YAML tests
are asset checks of that step; an error-severity check that fails keeps the previous table and skips what
is downstream of it. `analytics/published`, what analysts read while syncs run, is written by the same step
after the models: a model that fails (it does not render, a SQL error, a blocking test) skips only what reads
it, everything else is built and published, and then the step fails naming the model. (In a step of its own,
`analytics/published` would be skipped by Dagster whenever any model failed.)

`build_analytics(settings)` reads the models of Settings.models_dir (files only; a broken model does not stop
the code location from loading: it is an asset whose build fails); its assets need the `WarehouseResource`
under the key `warehouse`.
"""

# No `from __future__ import annotations`: Dagster reads the Config and resource annotations at runtime.

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
    multi_asset,
)
from pydantic import Field

from pipeline import analytics  # analytics.publish: `from ... import publish` would name the module publish.py
from pipeline.analytics import MODEL_SCHEMA, AnalyticsProject, ModelResult, load_project, models_built_ahead, relation
from pipeline.defs.analytics.checks import PUBLISHED_KEY, published_files_check
from pipeline.defs.analytics.specs import (
    GROUP,
    asset_key,
    asset_spec,
    check_results,
    check_specs,
    log_line,
    materialization,
    unchanged_line,
)
from pipeline.defs.policy import POOL, is_full_refresh
from pipeline.defs.resources import WarehouseResource
from pipeline.extras import require_extra
from pipeline.settings import Settings, parse_as_of

AS_OF_ENV = "LESSONSYNC_ANALYTICS_AS_OF"  # default `as_of` when the run config gives none (e.g. the demo's clock)


class AnalyticsBuildConfig(Config):
    as_of: str | None = Field(
        None,
        description="Reference instant of time-relative figures (certificates expiring within 30 days...): a date "
        f"(midnight UTC) or an ISO 8601 timestamp with offset, e.g. 2026-11-22 or 2026-11-22T00:00:00Z. Default: "
        f"${AS_OF_ENV}, else when the run starts.",
    )
    full_refresh: bool = Field(
        False,
        description="Rebuild every selected model whole, even those whose inputs did not change since their last "
        "build, incremental ones included. The full_refresh job sets it too, and then also writes every published "
        "file anew.",
    )


@dataclass(frozen=True)
class Analytics:
    project: AnalyticsProject
    models: AssetsDefinition  # every model, one subsettable step (with analytics/published under our runner)
    published: AssetsDefinition | None  # analytics/published as a step of its own, after dbt's (models_runner dbt)
    published_check: AssetChecksDefinition

    @property
    def assets(self) -> list[AssetsDefinition]:
        return [self.models, *([self.published] if self.published is not None else [])]

    @property
    def checks(self) -> list[AssetChecksDefinition]:
        return [self.published_check]


def _parse_as_of(text: str | None, default: str | None) -> datetime:
    text = text or default
    if not text:
        return datetime.now(UTC)
    try:
        return parse_as_of(text)
    except ValueError as error:
        raise Failure(f"as_of {error}") from None


def build_analytics(settings: Settings) -> Analytics:
    """The models of Settings.models_dir (default dbt_like_sql/) as assets; `as_of` defaults to
    Settings.analytics_as_of."""
    project = load_project(settings.models_dir)
    if settings.models_runner == "dbt":
        require_extra("dbt", "LESSONSYNC_MODELS_RUNNER=dbt")
        from pipeline.defs.analytics.dbt_runner import dbt_models_asset  # the `dbt` extra, imported only when used

        # dbt runs in the models directory: its target (and logs) go to an absolute path under the data directory
        target = settings.data_dir.absolute() / "dbt_target"
        models = dbt_models_asset(project, target, settings.analytics_as_of)
        return Analytics(project, models, _published_asset(project), published_files_check(project))
    return Analytics(project, _models_asset(project, settings.analytics_as_of), None, published_files_check(project))


def _models_asset(project: AnalyticsProject, default_as_of: str | None) -> AssetsDefinition:
    publish_now = _publisher(project)

    @multi_asset(
        name="analytics_models",
        specs=[*(asset_spec(m, project.root.parent) for m in project.models.values()), _published_spec(project)],
        check_specs=[spec for m in project.models.values() for spec in check_specs(m)],
        can_subset=True,
        pool=POOL,
        description="Builds the selected dbt_like_sql models into DuckDB schema `analytics`, in dependency order, "
        "then publishes them for analysts (analytics/published), a failed model as its previous build.",
    )
    def analytics_models(
        context: AssetExecutionContext, config: AnalyticsBuildConfig, warehouse: WarehouseResource
    ) -> Iterator[MaterializeResult[Any] | AssetCheckResult]:
        selected = {key.path[-1] for key in context.selected_asset_keys if key != PUBLISHED_KEY}
        as_of = _parse_as_of(config.as_of, default_as_of)
        full_refresh = config.full_refresh or is_full_refresh(context.run.tags)
        failures = list(project.rejected)
        unchanged: list[ModelResult] = []
        if selected:
            with (
                warehouse.connect() as conn,
                models_built_ahead(conn, project, selected, as_of, full_refresh=full_refresh) as results,
            ):
                for result in results:
                    if result.status == "unchanged":
                        unchanged.append(result)
                    else:
                        (context.log.info if result.status == "built" else context.log.error)(log_line(result))
                    yield from check_results(result.outcomes, set(context.selected_asset_check_keys))
                    if result.status == "built":
                        yield materialization(result, as_of)
                    elif result.status != "unchanged":
                        failures.append(result.error or result.model.name)
            if unchanged:
                context.log.info(unchanged_line(unchanged))
        published, unpublished = False, ""
        if PUBLISHED_KEY in context.selected_asset_keys:
            try:
                copy = publish_now(context, warehouse)
            except Exception as error:
                if not failures:
                    raise
                # e.g. the Iceberg mirror of a mart never built: said after the models that failed, not instead
                unpublished = f" | analytics/published not written: {' '.join(str(error).split())}"
            else:
                published = True
                kept = {"models_unchanged": MetadataValue.json(sorted(r.model.name for r in unchanged))}
                yield MaterializeResult(asset_key=PUBLISHED_KEY, metadata={**(copy.metadata or {}), **kept})
        if failures:
            others = "every other model built and published" if published else "every other model built"
            raise Failure(
                description=f"{len(failures)} analytics model(s) not rebuilt (their previous tables kept; {others}): "
                + " | ".join(failures)
                + unpublished
            )

    return analytics_models


def mart_relations(project: AnalyticsProject) -> dict[str, str]:
    """Each published mart and the warehouse relation that holds it (what the Iceberg mirror copies:
    pipeline/defs/lake/assets.py)."""
    return {m.name: relation(MODEL_SCHEMA, m.name) for m in project.marts}


# Markdown in the UI: a path is code, or its `<mart>` would be taken for an HTML tag and vanish.
PUBLISHED_DESCRIPTION = (
    "What analysts query while syncs run: `data/analytics.duckdb` (views over every published model and raw table, "
    "their Parquet files under `data/published/` written where they changed; swapped atomically; open it "
    "read-only) and `data/marts/<mart>.parquet`."
)


def _published_spec(project: AnalyticsProject) -> AssetSpec:
    return AssetSpec(
        PUBLISHED_KEY,
        deps=[asset_key(m) for m in project.published],
        group_name=GROUP,
        kinds={"duckdb", "parquet"},
        description=PUBLISHED_DESCRIPTION,
    )


def _published_asset(project: AnalyticsProject) -> AssetsDefinition:
    """analytics/published as a step of its own: after dbt's step, when dbt builds the models."""
    return asset(
        key=PUBLISHED_KEY,
        deps=[asset_key(m) for m in project.published],
        group_name=GROUP,
        kinds={"duckdb", "parquet"},
        pool=POOL,
        description=PUBLISHED_DESCRIPTION,
    )(_publisher(project))


def _publisher(
    project: AnalyticsProject,
) -> Callable[[AssetExecutionContext, WarehouseResource], MaterializeResult[Any]]:
    """What materializes analytics/published: the snapshot and the Parquet marts of what the warehouse holds."""

    def analytics_published(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult[Any]:
        mirror = warehouse.warehouse().table_mirror  # its files of a raw table, linked where they hold its rows
        try:
            with warehouse.connect() as conn:
                rewrite = is_full_refresh(context.run.tags)
                data_files_of = mirror.current_data_files if mirror is not None else None
                result = analytics.publish(
                    conn, project, Path(warehouse.data_dir), rewrite=rewrite, data_files_of=data_files_of
                )
        finally:
            if mirror is not None:
                mirror.close()  # the catalog's connections, opened only when a table's files were asked for
        context.log.info(
            f"published {len(result.rows)} tables and {len(result.parquet)} marts in {result.seconds:.2f}s"
        )
        return MaterializeResult(
            metadata={
                "snapshot": MetadataValue.path(str(result.snapshot)),
                "snapshot_bytes": result.snapshot.stat().st_size,
                "bytes_written": sum(result.written.values()),
                "marts": MetadataValue.json({m: str(p) for m, p in result.parquet.items()}),
                "rows": MetadataValue.json(result.rows),
                "published_at": result.published_at.isoformat(),
                "seconds": round(result.seconds, 3),
                "left_out": MetadataValue.json(result.left_out),
            }
        )

    return analytics_published
