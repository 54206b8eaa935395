"""Descriptions wherever an analyst looks, from one source each (the contract for raw tables, the models' YAML
for staging and marts): the warehouse's and the published snapshot's comments on every relation and column, the
Parquet marts' metadata, and every asset's `dagster/column_schema` in the code location."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from analytics_world import AS_OF, create_raw_tables, seed_small_world

from pipeline.analytics.build import ModelResult, build_models
from pipeline.analytics.comments import PARQUET_DESCRIPTION_KEY, PARQUET_MODEL_KEY
from pipeline.analytics.models import AnalyticsProject
from pipeline.analytics.publish import publish
from pipeline.contract.descriptions import undocumented_columns
from pipeline.contract.tables import TABLES
from pipeline.defs.code_location import build_definitions
from pipeline.settings import Settings


@pytest.fixture(scope="module")
def published(
    tmp_path_factory: pytest.TempPathFactory, project: AnalyticsProject
) -> Iterator[tuple[Path, list[ModelResult]]]:
    """The small world built and published once for the module (the tests only read)."""
    data_dir = tmp_path_factory.mktemp("described")
    create_raw_tables(data_dir / "warehouse.duckdb")
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as conn:
        seed_small_world(conn)
        results = list(build_models(conn, project, as_of=AS_OF))
        assert [r.error for r in results if r.status != "built"] == []
        publish(conn, project, data_dir)
    yield data_dir, results


def uncommented(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """`schema.relation[.column]` of every relation and column of the file without a comment."""
    return [
        ".".join(part for part in row if part)
        for row in conn.execute(
            "SELECT schema_name, table_name, NULL FROM duckdb_tables() WHERE comment IS NULL OR comment = '' "
            "UNION ALL SELECT schema_name, view_name, NULL FROM duckdb_views() WHERE NOT internal "
            "AND (comment IS NULL OR comment = '') UNION ALL SELECT schema_name, table_name, column_name "
            "FROM duckdb_columns() WHERE NOT internal AND (comment IS NULL OR comment = '') ORDER BY ALL"
        ).fetchall()
    ]


def test_every_raw_column_is_described_in_the_contract() -> None:
    assert undocumented_columns() == []


def test_every_materialized_column_is_in_its_yaml_with_a_description(published: tuple[Path, list]) -> None:
    _, results = published
    for result in results:
        model = result.model
        assert model.description, f"{model.sql_path.with_suffix('.yml')}: the model has no description"
        materialized = [name for name, _ in result.columns]
        assert set(materialized) == set(model.columns), (
            f"{model.sql_path.with_suffix('.yml')}: YAML columns differ from the materialized ones: "
            f"only materialized {sorted(set(materialized) - set(model.columns))}, "
            f"only in YAML {sorted(set(model.columns) - set(materialized))}"
        )
        undescribed = [name for name in materialized if not model.columns[name]]
        assert undescribed == [], f"{model.name}: columns without a description: {undescribed}"


def test_the_warehouse_comments_every_relation_and_column(published: tuple[Path, list]) -> None:
    data_dir, _ = published
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as conn:
        assert uncommented(conn) == []
        comment = conn.execute(
            "SELECT comment FROM duckdb_columns() WHERE schema_name = 'analytics' AND table_name = 'lesson_funnel' "
            "AND column_name = 'lesson_status'"
        ).fetchall()
    assert comment and comment[0][0].startswith("Status of the lesson in the catalogue")


def test_the_published_snapshot_comments_every_table_and_column(
    published: tuple[Path, list], project: AnalyticsProject
) -> None:
    data_dir, _ = published
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as conn:
        assert uncommented(conn) == []
        schemas = {
            r[0]
            for r in conn.execute("SELECT DISTINCT schema_name FROM duckdb_columns() WHERE NOT internal").fetchall()
        }
        mart = conn.execute(
            "SELECT comment FROM duckdb_views() WHERE schema_name = 'main' AND view_name = 'learner_progress'"
        ).fetchall()
    assert schemas == {"main", "lms"}  # models (staging and marts) and the raw tables
    assert mart == [(project.models["learner_progress"].description,)]


def test_parquet_marts_carry_the_descriptions(published: tuple[Path, list], project: AnalyticsProject) -> None:
    data_dir, _ = published
    for mart in project.marts:
        schema = pq.read_schema(data_dir / "marts" / f"{mart.name}.parquet")
        assert schema.metadata[PARQUET_DESCRIPTION_KEY].decode() == mart.description
        assert json.loads(schema.metadata[PARQUET_MODEL_KEY])["columns"] == mart.columns
        fields = {f.name: (f.metadata or {}).get(PARQUET_DESCRIPTION_KEY, b"").decode() for f in schema}
        published = {name: text for name, text in mart.columns.items() if not name.startswith("_")}
        assert fields == published, mart.name  # a bookkeeping column (`_...`) stays in the warehouse
        assert pq.ParquetFile(data_dir / "marts" / f"{mart.name}.parquet").metadata.num_rows >= 0


def test_every_asset_describes_every_column_in_dagster(tmp_path: Path) -> None:
    defs = build_definitions(Settings(data_dir=tmp_path))
    specs = {spec.key.to_user_string(): spec for spec in defs.resolve_all_asset_specs()}
    tables = [key for key in specs if key.startswith(("lms/", "analytics/")) and key != "analytics/published"]
    assert len([k for k in tables if k.startswith("lms/")]) >= 13
    for key in tables:
        schema = specs[key].metadata.get("dagster/column_schema")
        assert schema is not None and schema.columns, f"{key}: no dagster/column_schema"
        assert [c.name for c in schema.columns if not c.description] == [], f"{key}: columns without description"
    published = specs["analytics/published"].description or ""
    assert re.search(r"(?<!`)<\w+>", re.sub(r"`[^`]*`", "", published)) is None, "an HTML-like tag outside code"
    assert "`data/marts/<mart>.parquet`" in published


@pytest.mark.slow
def test_a_synced_warehouse_comments_every_raw_table_and_column(synced_tiny: Any) -> None:
    """Every table a real sync creates in lms (sync state tables included), not only the contract's."""
    with duckdb.connect(str(synced_tiny.warehouse_path), read_only=True) as conn:
        assert [name for name in uncommented(conn) if name.startswith("lms.")] == []


def test_sources_yml_describes_the_raw_tables_as_the_contract_does(project: AnalyticsProject) -> None:
    assert project.sources == {name: TABLES[name].description for name in project.sources}
