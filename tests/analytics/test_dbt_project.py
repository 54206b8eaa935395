"""Real dbt (dbt-core + dbt-duckdb) runs dbt_like_sql/ unchanged: `dbt parse` reads every model, test and source,
`dbt build` over a copy of the synced tiny warehouse passes every model and test, and every mart it builds equals
the one LessonSync's runner builds from the same warehouse, row for row.

The dbt hub is not reachable here: the copied project gets tests/analytics/dbt_utils_offline/ installed as
`dbt_packages/dbt_utils`, so packages.yml resolves without `dbt deps` (online, `dbt deps` installs dbt_utils)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipeline.analytics.build import build_models
from pipeline.analytics.models import DEFAULT_MODELS_DIR, AnalyticsProject, load_project
from pipeline.analytics.sql import quote

pytestmark = pytest.mark.slow  # the suite's tiny sync, then two dbt invocations (~25 s on a loaded machine)

DBT = Path(sys.executable).with_name("dbt")
OFFLINE_DBT_UTILS = Path(__file__).with_name("dbt_utils_offline")


@dataclass
class DbtRun:
    project: AnalyticsProject
    product: Path  # warehouse copy built by LessonSync's runner
    dbt: Path  # warehouse copy built by dbt
    manifest: dict[str, Any]
    results: dict[str, Any]


def dbt(project_dir: Path, *args: str, warehouse: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LESSONSYNC_WAREHOUSE_PATH": str(warehouse),
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
        "DBT_PROFILES_DIR": str(project_dir),  # the example profiles.yml, as shipped
    }
    return subprocess.run(
        [str(DBT), *args, "--no-use-colors"], cwd=project_dir, env=env, capture_output=True, text=True, timeout=240
    )


def as_of_var(as_of: datetime) -> str:
    """--vars for dbt: as_of is a TIMESTAMPTZ expression (dbt_project.yml)."""
    return json.dumps({"as_of": f"'{as_of.isoformat()}'::timestamptz"})


@pytest.fixture(scope="module")
def dbt_run(synced_tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> DbtRun:
    if not DBT.exists():
        pytest.fail(f"{DBT} missing: install the dev extra (it includes dbt-core and dbt-duckdb)")
    root = tmp_path_factory.mktemp("dbt")
    project = load_project()
    as_of = synced_tiny.sim.now()
    product, dbt_warehouse = root / "product.duckdb", root / "dbt.duckdb"
    shutil.copy2(synced_tiny.warehouse_path, product)
    shutil.copy2(synced_tiny.warehouse_path, dbt_warehouse)
    with duckdb.connect(str(product)) as conn:
        failed = [r.error for r in build_models(conn, project, as_of=as_of) if r.status != "built"]
    assert failed == []

    project_dir = root / "dbt_like_sql"
    shutil.copytree(DEFAULT_MODELS_DIR, project_dir, ignore=shutil.ignore_patterns("target", "dbt_packages", "logs"))
    shutil.copytree(OFFLINE_DBT_UTILS, project_dir / "dbt_packages" / "dbt_utils")
    parsed = dbt(project_dir, "parse", warehouse=dbt_warehouse)
    assert parsed.returncode == 0, parsed.stdout[-3000:]
    manifest = json.loads((project_dir / "target" / "manifest.json").read_text())
    built = dbt(project_dir, "build", "--vars", as_of_var(as_of), warehouse=dbt_warehouse)
    results = json.loads((project_dir / "target" / "run_results.json").read_text())
    assert built.returncode == 0, built.stdout[-3000:]
    return DbtRun(project, product, dbt_warehouse, manifest, results)


def test_dbt_parse_reads_every_model_test_and_source(dbt_run: DbtRun) -> None:
    nodes = dbt_run.manifest["nodes"].values()
    models = {n["name"] for n in nodes if n["resource_type"] == "model"}
    tests = [n for n in nodes if n["resource_type"] == "test"]
    assert models == set(dbt_run.project.models)
    assert len(tests) == sum(len(m.tests) for m in dbt_run.project.models.values())
    assert {s["name"] for s in dbt_run.manifest["sources"].values()} == set(dbt_run.project.sources)


def test_dbt_build_passes_every_model_and_test(dbt_run: DbtRun) -> None:
    statuses: dict[str, int] = {}
    for result in dbt_run.results["results"]:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    models = len(dbt_run.project.models)
    tests = sum(len(m.tests) for m in dbt_run.project.models.values())
    assert statuses == {"success": models, "pass": tests}


def test_every_mart_built_by_dbt_equals_the_products_row_for_row(dbt_run: DbtRun) -> None:
    with duckdb.connect() as conn:
        conn.execute(f"ATTACH '{dbt_run.product}' AS product (READ_ONLY)")
        conn.execute(f"ATTACH '{dbt_run.dbt}' AS dbt (READ_ONLY)")
        total = 0
        for mart in dbt_run.project.marts:
            ours, theirs = f"product.analytics.{quote(mart.name)}", f"dbt.analytics.{quote(mart.name)}"
            assert conn.execute(f"DESCRIBE {ours}").fetchall() == conn.execute(f"DESCRIBE {theirs}").fetchall()
            rows = conn.execute(f"SELECT count(*) FROM {ours}").fetchone()
            assert rows == conn.execute(f"SELECT count(*) FROM {theirs}").fetchone(), mart.name
            for left, right in ((ours, theirs), (theirs, ours)):
                extra = conn.execute(f"SELECT * FROM {left} EXCEPT ALL SELECT * FROM {right} LIMIT 3").fetchall()
                assert extra == [], f"{mart.name}: rows in {left} only: {extra}"
            total += rows[0] if rows else 0
        assert total > 0, "the marts hold rows: an empty comparison would prove nothing"


def test_dbt_persists_the_yaml_descriptions_as_comments(dbt_run: DbtRun) -> None:
    with duckdb.connect(str(dbt_run.dbt), read_only=True) as conn:
        comments = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, comment FROM duckdb_columns() WHERE schema_name = 'analytics'"
            ).fetchall()
        )
    mart = dbt_run.project.models["learner_progress"]
    assert {c: comments[f"learner_progress.{c}"] for c in mart.columns} == mart.columns
