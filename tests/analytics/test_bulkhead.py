"""One broken model never takes the rest down. A copy of dbt_like_sql/ with a model in everyday dbt style
(config(materialized='table'), {% set %}, {% if %}, a macro of macros/, ref()), a model with a SQL error and one
reading it, and a model using what LessonSync's runner does not render: the code location loads (`dagster definitions
validate`), and a sync against the simulator commits every raw table, builds and publishes the dbt-style model and
every mart of the product, skips only the SQL error's descendant, and fails naming the broken models."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from stack_helpers import assert_warehouse_equals_platform

from pipeline.analytics.models import DEFAULT_MODELS_DIR, MODELS_DIR_ENV, load_project
from pipeline.stack import local_stack

pytestmark = pytest.mark.slow  # the Dagster CLI in a subprocess, a sync of a tiny platform

# In staging/, where a model is a view by default: config() makes it a table.
DBT_STYLE = """{{ config(materialized='table') }}
{% set min_learners = 1 %}
{% set with_rate = true %}

with

lesson_funnel as (

    select * from {{ ref('lesson_funnel') }}

)

select
    lesson_id,
    learners{% if with_rate %},
    {{ rate('succeeded', 'learners') }} as success_share{% endif %}

from lesson_funnel

where learners >= {{ min_learners }}
"""
SQL_ERROR = "select no_such_column from {{ ref('stg_users') }}\n"
DESCENDANT = "select * from {{ ref('broken_sql') }}\n"
UNRENDERED = "select * from {{ ref('stg_lessons') }}\n{{ adapter.get_relation('x') }}\n"


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    root = Path(shutil.copytree(DEFAULT_MODELS_DIR, tmp_path / "models"))
    (root / "staging" / "dbt_style.sql").write_text(DBT_STYLE)
    (root / "marts" / "broken_sql.sql").write_text(SQL_ERROR)
    (root / "marts" / "reads_broken.sql").write_text(DESCENDANT)
    (root / "marts" / "unrendered.sql").write_text(UNRENDERED)
    return root


def test_dagster_definitions_validate_passes(models_dir: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        MODELS_DIR_ENV: str(models_dir),
        "LESSONSYNC_DATA_DIR": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }
    (tmp_path / "dagster_home").mkdir()
    dagster = Path(sys.executable).with_name("dagster")
    done = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "pipeline.definitions"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Validation successful" in done.stdout + done.stderr


def test_a_sync_builds_and_publishes_all_but_the_broken_models_and_names_them(models_dir: Path, tmp_path: Path) -> None:
    project = load_project(models_dir)
    assert set(project.problems) == {"unrendered"}  # the SQL error is for DuckDB to find, when it builds
    assert "unrendered.sql:2: 'adapter' is undefined" in project.problems["unrendered"]
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.advance(hours=24)
        stack.env[MODELS_DIR_ENV] = str(models_dir)
        report = stack.sync()
        assert_warehouse_equals_platform(stack)  # every raw table committed, exactly

    assert not report.success
    assert report.error is not None
    assert "model broken_sql failed to build" in report.error and "no_such_column" in report.error
    assert "model unrendered cannot be built" in report.error and "'adapter' is undefined" in report.error
    assert "model reads_broken skipped: upstream model(s) failed: broken_sql" in report.error
    built = {key.split("/")[-1] for key in report.materializations if key.startswith("analytics/")}
    broken = {"broken_sql", "reads_broken", "unrendered"}
    assert built == set(project.models) - broken | {"published"}

    data_dir = tmp_path / "data"
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as warehouse:
        kind = warehouse.execute(
            "SELECT table_type FROM information_schema.tables WHERE table_schema = 'analytics' "
            "AND table_name = 'dbt_style'"
        ).fetchall()
        expected = warehouse.execute(
            "SELECT lesson_id, learners, succeeded / nullif(learners, 0) FROM analytics.lesson_funnel "
            "WHERE learners >= 1 ORDER BY ALL"
        ).fetchall()
    assert kind == [("BASE TABLE",)]  # config(materialized='table') in staging/, whose default is a view
    assert expected, "the dbt-style model has rows to compare"
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        assert snapshot.execute("SELECT * FROM dbt_style ORDER BY ALL").fetchall() == expected
        published = {name for (name,) in snapshot.execute("SELECT model FROM _builds").fetchall()}
    assert published == set(project.models) - broken
    marts = {m.name for m in load_project().marts}
    assert marts <= {path.stem for path in (data_dir / "marts").glob("*.parquet")}
