"""A broken model fails when the project loads (or, for what only the database can tell, when it builds),
with a message naming the file and what is wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.analytics.errors import ModelError
from pipeline.analytics.models import DEFAULT_MODELS_DIR, MODELS_DIR_ENV, load_project


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
    with pytest.raises(ModelError) as raised:
        load_project(models_dir)
    return str(raised.value)


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


@pytest.mark.parametrize(
    ("yml", "expected"),
    [
        ("columns:\n  x:\n    tests: [uniq]\n", "columns.x.tests[0]: expected one of unique, not_null"),
        ("columns:\n  x:\n    tests: [{relationships: {to: analytics.nope, field: id}}]\n",
         "unknown table analytics.nope"),
        ("columns:\n  x:\n    tests: [{accepted_values: {}}]\n", "non-empty `values` list"),
        ("tests:\n  - not_null\n", "tests[0]: expected a column"),
        ("materialized: ephemeral\n", "materialized: expected 'table' or 'view'"),
        ("columns: [x]\n", "columns: expected a mapping"),
        ("publish: maybe\n", "publish: expected true or false"),
        ("columns:\n  x:\n    tests: [not_null, not_null]\n", "declared twice: not_null__x"),
        ("description: [unclosed\n", "is not valid YAML"),
    ],
)
def test_invalid_yaml_names_the_file_and_place(models_dir: Path, yml: str, expected: str) -> None:
    path = add_model(models_dir, "broken", "SELECT 1 AS x FROM analytics.stg_lessons", yml)
    message = load_error(models_dir)
    assert str(path.with_suffix(".yml")) in message and expected in message


def test_missing_sources_file(models_dir: Path) -> None:
    (models_dir / "sources.yml").unlink()
    assert "sources.yml: missing" in load_error(models_dir)


@pytest.mark.slow
def test_code_location_load_fails_naming_file_and_table(models_dir: Path) -> None:
    """What `dagster dev` shows: loading the code location fails with the clear message."""
    path = add_model(models_dir, "broken", "SELECT * FROM lms.nope")
    env = {**os.environ, MODELS_DIR_ENV: str(models_dir)}
    done = subprocess.run([sys.executable, "-c", "import pipeline.definitions"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.startswith("pipeline.analytics.errors.ModelError: ")
    assert str(path) in last_line and "unknown table lms.nope" in last_line
