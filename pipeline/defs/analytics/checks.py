"""The check of what analysts read: the published snapshot and Parquet marts agree with the models. (Each model's
YAML tests are checks of the models' step: assets.py.)"""

# No `from __future__ import annotations`: Dagster reads the resource annotations at runtime.

from pathlib import Path

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetKey,
    MetadataValue,
    asset_check,
)

from pipeline.analytics import MODEL_SCHEMA, AnalyticsProject, verify_published
from pipeline.defs.resources import WarehouseResource

PUBLISHED_KEY = AssetKey([MODEL_SCHEMA, "published"])


def published_files_check(project: AnalyticsProject) -> AssetChecksDefinition:
    """Reads only the published files, so it runs even while a sync holds the warehouse."""

    @asset_check(
        asset=PUBLISHED_KEY,
        name="published_files_consistent",
        description="data/analytics.duckdb opens read-only with every model, and every mart's Parquet file is "
        "readable with the row count of the manifest. Reads only the published files: runs even during a sync.",
    )
    def _check(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> AssetCheckResult:
        problems, rows = verify_published(project, Path(warehouse.data_dir))
        return AssetCheckResult(
            passed=not problems,
            description="; ".join(problems) or "snapshot and Parquet files agree",
            metadata={"problems": len(problems), "rows": MetadataValue.json(rows)},
        )

    return _check
