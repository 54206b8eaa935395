"""Models as Dagster sees them: asset and check specs from the project, and build results as Dagster events.
Kept apart from the asset definitions so that pipeline/defs/analytics/assets.py reads as the wiring only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    AssetSpec,
    DataVersion,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableSchema,
)

from pipeline.analytics import MODEL_SCHEMA, Model, ModelResult, TableRef, TestOutcome

GROUP = "analytics"
# The tag keys Dagster takes (an optional `prefix/`, names of up to 63 letters, digits, `_`, `.` or `-`). A dbt tag
# outside them still selects the model under dbt; it is left out of the asset's tags, as dagster-dbt leaves it.
_DAGSTER_TAG_KEY = re.compile(r"([A-Za-z0-9_.-]{1,63}/)?[A-Za-z0-9_.-]{1,63}")


def asset_key(ref: TableRef | Model) -> AssetKey:
    """lms/<table> for a raw table, analytics/<model> for a model."""
    return AssetKey([ref.schema, ref.name]) if isinstance(ref, TableRef) else AssetKey([MODEL_SCHEMA, ref.name])


def model_tags(model: Model) -> dict[str, str]:
    """The asset's tags: each dbt tag Dagster can key on, valueless as dagster-dbt makes them (`--select tag:x`),
    and `layer`, the model's directory."""
    tags = {tag: "" for tag in model.tags if _DAGSTER_TAG_KEY.fullmatch(tag)}
    return {**tags, "layer": model.layer or "models"}


def asset_spec(model: Model, repo_root: Path, owners: list[str] | None = None) -> AssetSpec:
    columns = [TableColumn(name, description=text or None) for name, text in model.columns.items()]
    return AssetSpec(
        key=asset_key(model),
        deps=[asset_key(d) for d in model.deps],
        description=model.description or None,
        group_name=GROUP,
        kinds={"duckdb"},
        owners=owners,
        code_version=model.code_version,
        skippable=True,  # a model whose inputs did not change is not rebuilt, nor materialized
        tags=model_tags(model),
        metadata={
            "dagster/table_name": f"{MODEL_SCHEMA}.{model.name}",
            "dagster/column_schema": TableSchema(columns=columns),
            "sql": MetadataValue.path(str(model.sql_path.relative_to(repo_root))),
            "materialized": model.materialized,
        },
    )


def check_specs(model: Model) -> list[AssetCheckSpec]:
    """One check per YAML test; error-severity ones block what is downstream."""
    return [
        AssetCheckSpec(
            test.name,
            asset=asset_key(model),
            description=f"{test.description} ({test.severity})",
            blocking=test.severity == "error",
            additional_deps=[asset_key(test.to)] if test.to and test.to.name != model.name else None,
        )
        for test in model.tests
    ]


def check_results(outcomes: list[TestOutcome], selected: set[AssetCheckKey]) -> Iterator[AssetCheckResult]:
    for outcome in outcomes:
        key = AssetKey([MODEL_SCHEMA, outcome.test.model])
        if AssetCheckKey(key, outcome.test.name) not in selected:
            continue
        yield AssetCheckResult(
            asset_key=key,
            check_name=outcome.test.name,
            passed=outcome.passed,
            severity=AssetCheckSeverity.ERROR if outcome.test.severity == "error" else AssetCheckSeverity.WARN,
            description=outcome.summary(),
            metadata={"failing_rows": outcome.failing_rows, "sample": MetadataValue.json(_jsonable(outcome.sample))},
        )


def materialization(result: ModelResult, as_of: datetime) -> MaterializeResult[Any]:
    """A model built: its data version is the digest of its inputs. A model unchanged since its last build is not
    materialized at all (its spec is skippable): its last materialization, with the same data version, stands.
    `build` says how it was built: whole, or incrementally (then `rows_replaced` counts the rows its SQL gave)."""
    version = DataVersion(result.inputs) if result.inputs is not None else None
    incremental = {"rows_replaced": result.replaced} if result.replaced is not None else {}
    return MaterializeResult(
        asset_key=asset_key(result.model),
        data_version=version,
        metadata={
            "dagster/row_count": result.rows or 0,
            "dagster/column_schema": TableSchema(
                columns=[
                    TableColumn(name, type_, description=result.model.columns.get(name) or None)
                    for name, type_ in result.columns
                ]
            ),
            "seconds": round(result.seconds, 3),
            "as_of": as_of.isoformat(),
            "build": "incremental" if result.replaced is not None else "full",
            **incremental,
        },
    )


def unchanged_line(results: list[ModelResult]) -> str:
    """One line for every model the build skipped: a line each would be an event each in Dagster's log."""
    names = ", ".join(
        f"{r.model.name} ({r.built_at:%Y-%m-%d %H:%M:%S %Z})" if r.built_at is not None else r.model.name
        for r in results
    )
    return f"{len(results)} model(s) unchanged since their last build (built at), skipped: {names}"


def log_line(result: ModelResult) -> str:
    name = result.model.name
    if result.status == "built":
        how: str = result.model.materialized
        if result.replaced is not None:
            how = f"incremental: {result.replaced} rows replaced"
        return f"{name}: {result.rows} rows ({how}) in {result.seconds:.2f}s"
    return f"{result.status}: {result.error}"  # the error names the model


def _jsonable(values: list[Any]) -> list[Any]:
    return [v if isinstance(v, (str, int, float, bool, type(None))) else str(v) for v in values]
