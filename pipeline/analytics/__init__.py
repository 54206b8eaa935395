"""Analyst models: SQL files under dbt_like_sql/ built into DuckDB schema `analytics`, tested, and published
for analysts (data/analytics.duckdb, data/marts/*.parquet). Dagster assets: pipeline/defs/analytics/assets.py.

    project = load_project()                        # files only; a broken model keeps its problem (file, line)
    for result in build_models(conn, project, as_of=...):   # dependency order, atomic swap per model; a model
        ...                                                 # whose inputs did not change is `unchanged`
    publish(conn, project, data_dir)                # snapshot of views over Parquet files written where they changed

This module is the package's only entrance: code outside `pipeline.analytics` imports from here, never from its
modules (the import contract `analytics-facade` in pyproject.toml checks it). The Dagster side of the models (asset
and check specs, build results as events) is pipeline/defs/analytics/specs.py.
"""

from pipeline.analytics.build import (
    BUILDS_COLUMNS,
    BUILDS_DDL,
    BUILDS_MIGRATIONS,
    BUILDS_TABLE,
    ModelResult,
    build_models,
    models_built_ahead,
    models_to_build,
)
from pipeline.analytics.checks import TestOutcome
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA, TableRef
from pipeline.analytics.models import AnalyticsProject, Model, load_project
from pipeline.analytics.publish import PublishResult, publish
from pipeline.analytics.sql import relation
from pipeline.analytics.summary import mart_summary
from pipeline.analytics.verify import verify_published

__all__ = [
    "BUILDS_COLUMNS",
    "BUILDS_DDL",
    "BUILDS_MIGRATIONS",
    "BUILDS_TABLE",
    "MODEL_SCHEMA",
    "RAW_SCHEMA",
    "AnalyticsProject",
    "Model",
    "ModelError",
    "ModelResult",
    "PublishResult",
    "TableRef",
    "TestOutcome",
    "build_models",
    "load_project",
    "mart_summary",
    "models_built_ahead",
    "models_to_build",
    "publish",
    "relation",
    "verify_published",
]
