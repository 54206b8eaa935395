"""Analyst models: SQL files under dbt_like_sql/ built into DuckDB schema `analytics`, tested, and published
for analysts (data/analytics.duckdb, data/marts/*.parquet). Dagster assets: pipeline/defs/analytics/assets.py.

    project = load_project()                        # files only; a broken model keeps its problem (file, line)
    for result in build_models(conn, project, as_of=...):   # dependency order, atomic swap per model; a model
        ...                                                 # whose inputs did not change is `unchanged`
    publish(conn, project, data_dir)                # snapshot of views over Parquet files written where they changed
"""

from pipeline.analytics.build import ModelResult, build_models
from pipeline.analytics.errors import ModelError
from pipeline.analytics.models import AnalyticsProject, Model, load_project
from pipeline.analytics.publish import PublishResult, publish
from pipeline.analytics.summary import mart_summary
from pipeline.analytics.verify import verify_published

__all__ = [
    "AnalyticsProject",
    "Model",
    "ModelError",
    "ModelResult",
    "PublishResult",
    "build_models",
    "load_project",
    "mart_summary",
    "publish",
    "verify_published",
]
