"""Descriptions wherever an analyst looks, from one source each (the contract for raw tables, the models' YAML
for staging and marts): the warehouse's and the published snapshot's comments on every relation and column (and no
bookkeeping table in the snapshot), the Parquet marts' metadata as pyarrow, polars, DuckDB and pandas read it, the
Iceberg tables' field docs, and every asset's `dagster/column_schema` in the code location; a raw column of an API
field says what the field means, not only its name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest
from analytics_world import AS_OF, create_raw_tables, seed_small_world
from iceberg_helpers import ICEBERG_ENV, open_catalog

from pipeline.analytics.build import ModelResult, build_models
from pipeline.analytics.comments import PARQUET_DESCRIPTION_KEY, PARQUET_MODEL_KEY
from pipeline.analytics.models import AnalyticsProject
from pipeline.analytics.publish import publish
from pipeline.contract.descriptions import MEANINGS, SOURCES, api_paths, column_descriptions, undocumented_columns
from pipeline.contract.tables import TABLES
from pipeline.defs.code_location import build_definitions
from pipeline.settings import Settings, load_settings
from pipeline.stack import environment, local_stack
from pipeline.warehouse.duck.tabledef import SCHEMA
from pipeline.warehouse.lake.iceberg import MARTS_NAMESPACE, MIRROR_RECORD_DDL, IcebergLocation, IcebergMirror

COLUMNS_KEY = "lessonsync.column_descriptions"  # the file-level key readers are told about (docs/analysts.md)


@pytest.fixture(scope="module")
def published(
    tmp_path_factory: pytest.TempPathFactory, project: AnalyticsProject
) -> Iterator[tuple[Path, list[ModelResult]]]:
    """The small world built, its marts mirrored as Iceberg tables, and published, once for the module (the tests
    only read)."""
    data_dir = tmp_path_factory.mktemp("described")
    create_raw_tables(data_dir / "warehouse.duckdb")
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as conn:
        seed_small_world(conn)
        results = list(build_models(conn, project, as_of=AS_OF))
        assert [r.error for r in results if r.status != "built"] == []
        mirror = IcebergMirror(mart_mirror(data_dir))
        mirror.sync_marts(conn, {m.name: f"{MARTS_NAMESPACE}.{m.name}" for m in project.marts})
        publish(conn, project, data_dir)
    yield data_dir, results


def mart_mirror(data_dir: Path) -> IcebergLocation:
    return IcebergLocation.for_lake(data_dir / "lake", f"sqlite:///{data_dir / 'catalog.sqlite3'}")


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


def test_every_api_column_says_what_its_field_means_and_names_it() -> None:
    """Not only `API field stats.progressInPercent`: its meaning, with unit and range where known, then the name
    (docs/TABLES.md's readers look columns up by it)."""
    stubs, unnamed = [], []
    for name, (model, prefix, _) in SOURCES.items():
        paths = api_paths(model, prefix)
        described = column_descriptions(TABLES[name])
        for column in (f.name for f in TABLES[name].schema if f.name in paths):
            text = described[column]
            if text == f"API field {paths[column]}":
                stubs.append(f"{name}.{column}: {text}")
            elif not text.endswith(f"(API field {paths[column]})"):
                unnamed.append(f"{name}.{column}: {text}")
    assert stubs == [] and unnamed == [], "\n".join(stubs + unnamed)
    stale = [(m.__name__, p) for m, meant in MEANINGS.items() for p in meant if p not in api_paths(m).values()]
    assert stale == [], "meanings of fields the models do not have"

    def about(table: str, column: str) -> str:
        return column_descriptions(TABLES[table])[column]

    assert "in percent, 0-100" in about("active_lessons", "stats_progress_in_percent")
    assert "unit not specified" in about("active_lessons", "time_spent")  # the spec gives none: said, not guessed
    assert "milliseconds since 1970-01-01" in about("answers", "start_time_stamp")  # what the simulator sends
    assert "in days" in about("certificates", "rule_data_validity_duration_days")
    assert "waiting-list, pending-validation, approved or rejected" in about("lesson_session_registrations", "status")


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


def test_every_parquet_reader_finds_each_columns_description(
    published: tuple[Path, list], project: AnalyticsProject
) -> None:
    """polars and DuckDB show no Arrow field metadata: the file's key-value metadata carries the descriptions too,
    and pandas gets them as `df.attrs` without reading the file any differently."""
    data_dir, _ = published
    for mart in project.marts:
        path = data_dir / "marts" / f"{mart.name}.parquet"
        with open(path, "rb") as handle:
            file_columns = pq.read_schema(handle).names
        expected = {name: mart.columns[name] for name in file_columns}
        assert all(expected.values()), mart.name
        by_polars = pl.read_parquet_metadata(path)
        assert json.loads(by_polars[COLUMNS_KEY]) == expected
        assert by_polars["description"] == mart.description
        by_duckdb = dict(duckdb.sql(f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{path}')").fetchall())
        assert json.loads(by_duckdb[COLUMNS_KEY]) == expected
        assert by_duckdb["description"] == mart.description
        assert json.loads(pq.read_schema(path).metadata[COLUMNS_KEY.encode()]) == expected
        with open(path, "rb") as handle:
            frame = pd.read_parquet(handle)
        assert frame.attrs == {"description": mart.description, "column_descriptions": expected}
        with open(path, "rb") as handle:
            plain = pq.read_table(handle).to_pandas(ignore_metadata=True)
        pd.testing.assert_frame_equal(frame, plain, check_flags=False)


def test_the_iceberg_marts_document_every_field(published: tuple[Path, list], project: AnalyticsProject) -> None:
    data_dir, _ = published
    catalog = open_catalog(mart_mirror(data_dir))
    for mart in project.marts:
        docs = {f.name: f.doc for f in catalog.load_table((MARTS_NAMESPACE, mart.name)).schema().fields}
        assert {name: docs[name] for name in mart.columns} == mart.columns
        assert all(docs.values()), f"{mart.name}: fields without a doc: {[n for n, d in docs.items() if not d]}"


def test_the_snapshot_publishes_no_bookkeeping_table(data_dir: Path, project: AnalyticsProject) -> None:
    """The Iceberg mirror's record and a leftover of an interrupted migration stay in the warehouse; the load
    log, which says when data was loaded, is published with its description."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as conn:
        conn.execute(MIRROR_RECORD_DDL)
        conn.execute(f"CREATE TABLE {SCHEMA}._migrating_groups AS SELECT * FROM {SCHEMA}.groups")
        assert {r.status for r in build_models(conn, project, as_of=AS_OF)} == {"built"}
        publish(conn, project, data_dir)
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as conn:
        bookkeeping = conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? AND starts_with(table_name, '_')",
            [SCHEMA],
        ).fetchall()
        assert bookkeeping == [("_load_runs",)]
        assert uncommented(conn) == []


@pytest.mark.slow
def test_a_synced_and_published_stack_describes_everything_analysts_read(tmp_path: Path) -> None:
    """A real sync with the Iceberg mirror on: the published snapshot has no table or column without a comment
    (the mirror's own record, described in the warehouse, is not published), and every Iceberg field of every raw
    table and mart has a doc."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        report = stack.sync()
        assert report.success, report.error
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            assert conn.execute(f"SELECT count(*) FROM {SCHEMA}._iceberg_mirrored").fetchall()[0][0] > 0
            assert [name for name in uncommented(conn) if name.startswith(f"{SCHEMA}.")] == []  # described there
        with duckdb.connect(str(stack.data_dir / "analytics.duckdb"), read_only=True) as conn:
            assert uncommented(conn) == []
        with environment(stack.run_env()):
            catalog = open_catalog(load_settings())
        undocumented = [
            f"{'.'.join(identifier)}.{f.name}"
            for namespace in (SCHEMA, MARTS_NAMESPACE)
            for identifier in catalog.list_tables(namespace)
            for f in catalog.load_table(identifier).schema().fields
            if not f.doc
        ]
        assert len(catalog.list_tables(SCHEMA)) >= 13 and len(catalog.list_tables(MARTS_NAMESPACE)) >= 5
        assert undocumented == []


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
