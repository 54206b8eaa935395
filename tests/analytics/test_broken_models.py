"""A broken model is found when the project loads (or, for what only the database can tell, when it builds), with a
message naming the file and what is wrong; loading itself never fails for it: the model is kept with its problem
(its build fails) and every other model loads as usual."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, AssetSelection, Definitions

from pipeline.analytics.errors import ModelError
from pipeline.analytics.models import DEFAULT_MODELS_DIR, MODELS_DIR_ENV, load_project
from pipeline.defs.analytics.assets import build_analytics
from pipeline.defs.resources import WarehouseResource
from pipeline.settings import load_settings


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    """A copy of dbt_like_sql/ to break."""
    return Path(shutil.copytree(DEFAULT_MODELS_DIR, tmp_path / "dbt_like_sql"))


def add_model(models_dir: Path, name: str, sql: str, yml: str | None = None, layer: str = "marts") -> Path:
    path = models_dir / layer / f"{name}.sql"
    path.write_text(sql)
    if yml is not None:
        path.with_suffix(".yml").write_text(yml)
    return path


def load_error(models_dir: Path) -> str:
    """Every problem the project reports, one a line (loading does not raise)."""
    project = load_project(models_dir)
    problems = [*project.problems.values(), *project.rejected]
    assert problems, "the project reports no problem"
    return "\n".join(problems)


def test_unknown_raw_table_names_file_and_table(models_dir: Path) -> None:
    path = add_model(models_dir, "broken", "SELECT a.user_id FROM lms.active_lessons a JOIN lms.nope n USING (user_id)")
    message = load_error(models_dir)
    assert str(path) in message and "unknown table lms.nope" in message
    assert "lms.active_lessons" in message  # the known tables are listed, to spot the typo


def test_unknown_model_names_file_and_table(models_dir: Path) -> None:
    path = add_model(models_dir, "broken", "WITH x AS (SELECT * FROM analytics.stg_lesons) SELECT * FROM x")
    message = load_error(models_dir)
    assert str(path) in message and "unknown table analytics.stg_lesons" in message


def test_unqualified_table_is_refused_with_the_fix(models_dir: Path) -> None:
    path = add_model(models_dir, "broken", "SELECT * FROM answers")
    message = load_error(models_dir)
    assert str(path) in message and "lms.answers" in message and "analytics.answers" in message


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1; SELECT 2", "2 statements"),
        ("CREATE TABLE t AS SELECT 1", "a model is exactly one SELECT"),
        ("SELECT FROM WHERE (", "does not parse"),
        ("SELECT * FROM read_parquet('elsewhere.parquet')", "table function"),
        ("SELECT * FROM other_db.lms.answers", "database qualifier"),
        ("SELECT * FROM analytics.broken", "reads itself"),
    ],
)
def test_invalid_sql_is_refused(models_dir: Path, sql: str, expected: str) -> None:
    path = add_model(models_dir, "broken", sql)
    message = load_error(models_dir)
    assert str(path) in message and expected in message


def test_cycle_is_named(models_dir: Path) -> None:
    add_model(models_dir, "ping", "SELECT * FROM analytics.pong")
    add_model(models_dir, "pong", "SELECT * FROM analytics.ping")
    message = load_error(models_dir)
    assert "cycle" in message and "ping" in message and "pong" in message


def test_two_models_with_one_name(models_dir: Path) -> None:
    add_model(models_dir, "lesson_funnel", "SELECT 1 AS x", layer="staging")
    assert "two models named 'lesson_funnel'" in load_error(models_dir)


def model_yml(body: str, name: str = "broken") -> str:
    """A properties file in dbt's schema for the model `name`, its entry's body indented in place."""
    return f"version: 2\nmodels:\n  - name: {name}\n" + "".join(f"    {line}\n" for line in body.splitlines())


@pytest.mark.parametrize(
    ("yml", "expected"),
    [
        (
            model_yml("columns:\n  - name: x\n    data_tests: [uniq]"),
            "models[0].columns.x.data_tests[0]: expected one of unique, not_null, accepted_values, relationships",
        ),
        (
            model_yml(
                "columns:\n  - name: x\n    data_tests:\n"
                "      - relationships: {arguments: {to: ref('nope'), field: id}}"
            ),
            "unknown table analytics.nope",
        ),
        (
            model_yml(
                "columns:\n  - name: x\n    data_tests:\n"
                "      - relationships: {arguments: {to: analytics.stg_users, field: user_id}}"
            ),
            "data_tests[0].arguments.to: expected ref('<model>') or source('lms', '<table>')",
        ),
        (
            model_yml(
                "columns:\n  - name: x\n    data_tests:\n"
                "      - relationships: {arguments: {to: \"source('raw', 'users')\", field: id}}"
            ),
            "unknown source 'raw'",
        ),
        (
            model_yml("columns:\n  - name: x\n    data_tests: [{accepted_values: {arguments: {}}}]"),
            "data_tests[0].arguments: expected accepted_values with values (non-empty)",
        ),
        (
            model_yml(
                "columns:\n  - name: x\n    data_tests: [{accepted_values: {arguments: {values: [1], quote: no}}}]"
            ),
            "data_tests[0].arguments: expected values only",
        ),
        (
            model_yml("columns:\n  - name: x\n    data_tests: [{not_null: {arguments: {values: [1]}}}]"),
            "data_tests[0].arguments: expected none: not_null takes no arguments",
        ),
        (
            model_yml("columns:\n  - name: x\n    data_tests: [{accepted_values: {arguments: {values: a}}}]"),
            "data_tests[0].arguments.values: expected a list",
        ),
        (
            model_yml("columns:\n  - name: x\n    data_tests: [{accepted_values: {values: [1]}}]"),
            "values, to, field... go under arguments, severity under config",
        ),
        (
            model_yml("columns:\n  - name: x\n    data_tests: [{not_null: {config: {severity: fatal}}}]"),
            "data_tests[0].config.severity: expected error or warn",
        ),
        (model_yml("columns:\n  - name: x\n    data_tests: [not_null, not_null]"), "declared twice: not_null__x"),
        (
            model_yml("columns:\n  - name: x\n    tests: [not_null]"),
            "models[0].columns.x.tests: expected data_tests, dbt's name for tests since 1.8",
        ),
        (model_yml("columns:\n  - name: x\n  - name: x"), "models[0].columns[1].name: expected a column listed once"),
        (model_yml("columns:\n  - name: x\n    desc: typo"), "models[0].columns.x: expected only data_tests"),
        (model_yml("columns:\n  x: {description: old layout}"), "models[0].columns: expected a list"),
        (
            model_yml("data_tests: [not_null]"),
            "models[0].data_tests[0]: expected one of dbt_utils.unique_combination_of_columns",
        ),
        (
            model_yml(
                "data_tests:\n  - dbt_utils.unique_combination_of_columns:\n"
                "      arguments: {combination_of_columns: x}"
            ),
            "arguments.combination_of_columns: expected a list of column names",
        ),
        (
            model_yml("config: {materialized: ephemeral}"),
            "models[0].config.materialized: expected 'table', 'view' or 'incremental'",
        ),
        (model_yml("config: {meta: {publish: maybe}}"), "models[0].config.meta.publish: expected true or false"),
        (
            model_yml("config: {schema: other}"),
            "models[0].config: expected a mapping of materialized, unique_key, tags and/or meta",
        ),
        (model_yml("config: {tags: [nightly, {a: b}]}"), "models[0].config.tags: expected a tag name or a list"),
        (model_yml("description: x", name="other"), "models[0].name: expected 'broken'"),
        (model_yml("description: x") + "  - name: broken2\n", "models: expected a list of one entry"),
        ("version: 1\nmodels: [{name: broken}]\n", "version: expected 2"),
        (
            "description: the pre-dbt layout\ncolumns:\n  x: {description: an x}\n",
            "top level: expected dbt's schema: `version: 2` and `models: ",
        ),
        ("description: [unclosed\n", "is not valid YAML"),
    ],
)
def test_invalid_yaml_names_the_file_and_place(models_dir: Path, yml: str, expected: str) -> None:
    path = add_model(models_dir, "broken", "select 1 as x from {{ ref('stg_lessons') }}", yml)
    message = load_error(models_dir)
    assert str(path.with_suffix(".yml")) in message and expected in message


def test_yaml_in_dbts_schema_is_read_whole(models_dir: Path) -> None:
    """Every supported test kind and setting, read from one file: what the runner makes of each."""
    add_model(
        models_dir,
        "broken",
        "select 1 as x, 2 as y from {{ ref('stg_users') }}",
        model_yml(
            "description: >\n  Two lines,\n  one description.\n"
            "config: {materialized: view, meta: {publish: false}}\n"
            "data_tests:\n  - dbt_utils.unique_combination_of_columns:\n      arguments: {combination_of_columns: [x, y]}\n"
            "columns:\n"
            "  - name: x\n    description: An x, with a comma.\n    data_tests:\n      - unique\n"
            "      - relationships:\n          arguments: {to: \"source('lms', 'users')\", field: id}\n"
            "          config: {severity: WARN}\n"
            "  - name: y\n    data_tests: [{accepted_values: {arguments: {values: [2, 3]}}}]\n"
        ),
    )
    model = load_project(models_dir).models["broken"]
    assert (model.description, model.materialized, model.publish) == ("Two lines, one description.", "view", False)
    assert model.columns == {"x": "An x, with a comma.", "y": ""}
    tests = {t.name: (t.kind, t.columns, t.values, str(t.to), t.to_field, t.severity) for t in model.tests}
    assert tests == {
        "unique__x__y": ("unique", ("x", "y"), (), "None", None, "error"),
        "unique__x": ("unique", ("x",), (), "None", None, "error"),
        "relationships__x__users": ("relationships", ("x",), (), "lms.users", "id", "warn"),
        "accepted_values__y": ("accepted_values", ("y",), (2, 3), "None", None, "error"),
    }


def test_dbt_tags_are_read_from_yaml_and_config_and_select_the_model_in_dagster(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tags accumulate as dbt's do (the YAML's, then config()'s); each one Dagster can key on is a valueless asset
    tag, as dagster-dbt makes it, so `--select tag:<name>` picks the model."""
    add_model(
        models_dir,
        "tagged",
        "{{ config(materialized='table', tags=['extra', 'nightly', 'not a dagster key']) }}\n"
        "select 1 as x from {{ ref('stg_users') }}",
        model_yml("config: {tags: nightly}", name="tagged"),
    )
    monkeypatch.setenv(MODELS_DIR_ENV, str(models_dir))
    analytics = build_analytics(load_settings())
    assert analytics.project.problems == {}
    assert analytics.project.models["tagged"].tags == ("nightly", "extra", "not a dagster key")
    tagged = AssetKey(["analytics", "tagged"])
    assert {k: v for k, v in analytics.models.specs_by_key[tagged].tags.items() if "/" not in k} == {
        "nightly": "",
        "extra": "",
        "layer": "marts",
    }
    warehouse = WarehouseResource(data_dir=str(models_dir.parent / "data"))
    graph = Definitions(assets=[analytics.models], resources={"warehouse": warehouse}).resolve_asset_graph()
    assert AssetSelection.from_string("tag:extra").resolve(graph) == {tagged}
    assert tagged in AssetSelection.from_string("tag:layer=marts").resolve(graph)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select * from {{ ref('stg_lesons') }}", "unknown table analytics.stg_lesons"),
        ("select 1 as x\nfrom {{ source('raw', 'answers') }}", ":2: unknown source 'raw'"),
        ("select 1 as x from {{ source('lms', 'nope') }}", "unknown table lms.nope"),
        ("select 1 as x from {{ ref('broken') }}", "reads itself"),
        (
            "select\n{{ config(materialized='ephemeral') }}\n1 as x",
            ":2: config(materialized='ephemeral'): LessonSync's runner builds a 'table', a 'view' or an 'incremental'",
        ),
        (
            "{{ config(materialized='incremental') }}\nselect 1 as x",
            "an incremental model needs a unique_key (config(unique_key=...) in the SQL, or unique_key under config:",
        ),
        (
            "select 1 as x\n{% if true %} from {{ adapter.get_relation('x') }} {% endif %}",
            ":2: 'adapter' is undefined: LessonSync's runner renders ref, source, this, var, config",
        ),
    ],
)
def test_bad_reference_in_sql_names_file_line_and_table(models_dir: Path, sql: str, expected: str) -> None:
    path = add_model(models_dir, "broken", sql)
    message = load_error(models_dir)
    assert str(path) in message and expected in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tables:\n  answers: the pre-dbt layout\n", "expected dbt's schema with one source"),
        ("sources:\n  - name: raw\n    tables: [{name: answers}]\n", "expected dbt's schema with one source"),
        ("sources:\n  - name: lms\n    tables: []\n", "sources[0]: expected name, description and a non-empty"),
        (
            "sources:\n  - name: lms\n    tables: [{name: answers}, {name: answers}]\n",
            "sources[0].tables[1]: table 'answers' is declared twice",
        ),
        ("sources:\n  - name: lms\n    tables: [answers]\n", "sources[0].tables[0]: expected a mapping"),
    ],
)
def test_invalid_sources_file(models_dir: Path, text: str, expected: str) -> None:
    (models_dir / "sources.yml").write_text(text)
    message = load_error(models_dir)
    assert str(models_dir / "sources.yml") in message and expected in message


def test_missing_sources_file(models_dir: Path) -> None:
    (models_dir / "sources.yml").unlink()
    assert "sources.yml: missing" in load_error(models_dir)


def test_a_broken_model_keeps_the_dependencies_that_can_be_read(models_dir: Path) -> None:
    """It does not render: its dependencies are the calls written in it; it does not parse: the calls made."""
    add_model(models_dir, "unrendered", "select * from {{ ref('stg_users') }}\n{{ adapter.x() }}")
    add_model(models_dir, "unparsed", "select from where {{ ref('stg_lessons') }} {{ source('lms', 'answers') }}")
    project = load_project(models_dir)
    assert {n: [str(d) for d in project.models[n].deps] for n in ("unrendered", "unparsed")} == {
        "unrendered": ["analytics.stg_users"],
        "unparsed": ["analytics.stg_lessons", "lms.answers"],
    }
    assert set(project.problems) == {"unrendered", "unparsed"}


def test_a_directory_without_models_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=f"holds no .sql model; set {MODELS_DIR_ENV}"):
        load_project(tmp_path)


@pytest.mark.slow
def test_code_location_loads_with_the_broken_model_as_an_asset(models_dir: Path) -> None:
    """What `dagster dev` shows: the code location loads, the broken model is an asset (with the dependencies that
    could be read) whose description is not lost; it fails when built, naming file and table (test_bulkhead.py)."""
    add_model(models_dir, "broken", "SELECT * FROM lms.nope JOIN {{ ref('stg_users') }} USING (id)")
    env = {**os.environ, MODELS_DIR_ENV: str(models_dir)}
    script = (
        "import pipeline.definitions as d; from dagster import AssetKey; "
        "g = d.defs.resolve_asset_graph(); print(sorted(k.to_user_string() for k in "
        "g.get(AssetKey(['analytics', 'broken'])).parent_keys))"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['analytics/stg_users']"


def test_valid_until_on_a_model_that_does_not_read_as_of_is_a_problem_of_that_model(models_dir: Path) -> None:
    add_model(
        models_dir,
        "timeless",
        "{{ config(meta={'lessonsync': {'valid_until': 'min(n)'}}) }}\nSELECT count(*) AS n FROM {{ ref('stg_users') }}",
    )
    error = load_error(models_dir)
    assert "timeless.sql: config(meta={'lessonsync': {'valid_until': ...}}) is for a model that reads as_of()" in error
    assert load_project(models_dir).models["certificates"].problem is None


def test_a_valid_until_that_cannot_be_evaluated_fails_its_model_naming_it(models_dir: Path, tmp_path: Path) -> None:
    """Found when it builds (only the database can tell): the model fails and keeps its previous build."""
    import duckdb

    from pipeline.analytics.build import build_models
    from pipeline.contract.tables import TABLES
    from pipeline.warehouse import Warehouse

    path = models_dir / "marts" / "certificates.sql"
    path.write_text(path.read_text().replace("min(case when state", "min(case when no_such_column"))
    project = load_project(models_dir)
    warehouse = Warehouse(tmp_path / "w.duckdb", tmp_path / "lake")
    warehouse.ensure_tables(TABLES.values())
    with duckdb.connect(str(warehouse.path)) as conn:
        results = {r.model.name: r for r in build_models(conn, project, ["stg_certificates", "certificates"])}
    assert results["stg_certificates"].status == "built"
    assert results["certificates"].status == "failed"
    assert "its valid_until (min(case when no_such_column" in (results["certificates"].error or "")
