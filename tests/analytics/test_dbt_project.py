"""Real dbt (dbt-core + dbt-duckdb) runs dbt_like_sql/ unchanged: `dbt parse` reads every model, test and source,
`dbt build` over a copy of the synced tiny warehouse passes every model and test, and every mart it builds equals
the one LessonSync's runner builds from the same warehouse, row for row. The optional dagster-dbt runner
(LESSONSYNC_MODELS_RUNNER=dbt) builds the same assets and publishes them.

The dbt hub is not reachable here: the copied project gets tests/analytics/dbt_utils_offline/ installed as
`dbt_packages/dbt_utils`, so packages.yml resolves without `dbt deps` (online, `dbt deps` installs dbt_utils)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from analytics_world import record_load
from dagster import AssetKey, DagsterInstance, materialize

from pipeline.analytics.build import build_models
from pipeline.analytics.models import DEFAULT_MODELS_DIR, AnalyticsProject, load_project
from pipeline.analytics.sql import quote
from pipeline.cli.sync import summary_lines
from pipeline.defs.analytics.assets import PUBLISHED_KEY, build_analytics
from pipeline.defs.analytics.specs import asset_key
from pipeline.defs.policy import OWNERS
from pipeline.defs.resources import WarehouseResource
from pipeline.raw.mirror import MirrorWorker, await_background_mirror
from pipeline.settings import Settings, load_settings
from pipeline.warehouse import Warehouse, hooks

pytestmark = pytest.mark.slow  # the suite's tiny sync, then dbt: parse, build, and a run through dagster-dbt

DBT = Path(sys.executable).with_name("dbt")
OFFLINE_DBT_UTILS = Path(__file__).with_name("dbt_utils_offline")


@dataclass
class DbtRun:
    project: AnalyticsProject
    product: Path  # warehouse copy built by LessonSync's runner
    dbt: Path  # warehouse copy built by dbt
    manifest: dict[str, Any]
    results: dict[str, Any]
    project_dir: Path  # the copied models directory, dbt_utils installed
    as_of: datetime


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
    """--vars for dbt: as_of as an ISO 8601 timestamp with its offset (the macro as_of() casts it)."""
    return json.dumps({"as_of": as_of.isoformat()})


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
    return DbtRun(project, product, dbt_warehouse, manifest, results, project_dir, as_of)


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


def assert_same_marts(project: AnalyticsProject, ours: Path, theirs: Path) -> None:
    """Every mart of `theirs` equals the one of `ours`: same columns and types, same rows (EXCEPT ALL both ways)."""
    with duckdb.connect() as conn:
        conn.execute(f"ATTACH '{ours}' AS ours (READ_ONLY)")
        conn.execute(f"ATTACH '{theirs}' AS theirs (READ_ONLY)")
        total = 0
        for mart in project.marts:
            left, right = f"ours.analytics.{quote(mart.name)}", f"theirs.analytics.{quote(mart.name)}"
            assert conn.execute(f"DESCRIBE {left}").fetchall() == conn.execute(f"DESCRIBE {right}").fetchall()
            rows = conn.execute(f"SELECT count(*) FROM {left}").fetchone()
            assert rows == conn.execute(f"SELECT count(*) FROM {right}").fetchone(), mart.name
            for a, b in ((left, right), (right, left)):
                extra = conn.execute(f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b} LIMIT 3").fetchall()
                assert extra == [], f"{mart.name}: rows in {a} only: {extra}"
            total += rows[0] if rows else 0
        assert total > 0, "the marts hold rows: an empty comparison would prove nothing"


def test_every_mart_built_by_dbt_equals_the_products_row_for_row(dbt_run: DbtRun) -> None:
    assert_same_marts(dbt_run.project, dbt_run.product, dbt_run.dbt)


def test_dbt_persists_the_yaml_descriptions_as_comments(dbt_run: DbtRun) -> None:
    with duckdb.connect(str(dbt_run.dbt), read_only=True) as conn:
        comments = dict(
            conn.execute(
                "SELECT table_name || '.' || column_name, comment FROM duckdb_columns() WHERE schema_name = 'analytics'"
            ).fetchall()
        )
    mart = dbt_run.project.models["learner_progress"]
    assert {c: comments[f"learner_progress.{c}"] for c in mart.columns} == mart.columns


@pytest.mark.parametrize(
    ("given", "instant"),
    [
        ("{as_of: '2026-11-02'}", datetime(2026, 11, 2, tzinfo=UTC)),  # a date: midnight UTC
        ("{as_of: '2026-11-02 06:00:00+00'}", datetime(2026, 11, 2, 6, tzinfo=UTC)),
        ("{as_of: '2026-11-02T06:00:00Z'}", datetime(2026, 11, 2, 6, tzinfo=UTC)),
    ],
)
def test_dbt_takes_as_of_as_a_date_or_a_timestamp(
    dbt_run: DbtRun, tmp_path: Path, given: str, instant: datetime
) -> None:
    """`dbt build --vars "{as_of: '2026-11-02'}"`, as dbt users write it: the time-relative mart is built for that
    instant, equal row for row to LessonSync's runner's build at the same instant."""
    theirs, ours = tmp_path / "dbt.duckdb", tmp_path / "ours.duckdb"
    shutil.copy2(dbt_run.dbt, theirs)
    shutil.copy2(dbt_run.product, ours)
    built = dbt(dbt_run.project_dir, "build", "--select", "certificates", "--vars", given, warehouse=theirs)
    assert built.returncode == 0, built.stdout[-3000:]
    with duckdb.connect(str(ours)) as conn:
        assert [r.status for r in build_models(conn, dbt_run.project, ["certificates"], as_of=instant)] == ["built"]
    with duckdb.connect(str(theirs), read_only=True) as conn:
        assert conn.execute("SELECT DISTINCT as_of FROM analytics.certificates").fetchall() == [(instant,)]
    assert_same_marts(dbt_run.project, ours, theirs)


def test_dbt_names_an_as_of_without_an_offset(dbt_run: DbtRun, tmp_path: Path) -> None:
    shutil.copy2(dbt_run.dbt, tmp_path / "dbt.duckdb")
    built = dbt(
        dbt_run.project_dir,
        "build",
        "--select",
        "certificates",
        "--vars",
        "{as_of: '2026-11-02T06:00:00'}",
        warehouse=tmp_path / "dbt.duckdb",
    )
    assert built.returncode != 0
    assert "as_of '2026-11-02T06:00:00' has no UTC offset; add Z or +hh:mm" in built.stdout


def files_under(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under `root`: relative path -> (size, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_the_dagster_dbt_runner_builds_the_same_assets_then_publishes(
    dbt_run: DbtRun, synced_tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LESSONSYNC_MODELS_RUNNER=dbt at the default data directory (`data`, relative to the working directory): the
    models built by dbt through dagster-dbt's @dbt_assets, under the same asset keys and owners, each YAML test a
    check, analytics/published after them; the marts equal the product's; each model's row count is the table's;
    and nothing is written into the models directory (dbt runs there, but its target and logs go to the data
    directory). A background Iceberg mirror of this process (a raw step's) is still writing when the run starts: dbt's
    own process cannot open the file this process holds, so the dbt step waits for the mirror first."""
    monkeypatch.chdir(tmp_path)
    Path("data").mkdir()
    shutil.copy2(synced_tiny.warehouse_path, Path("data") / "warehouse.duckdb")
    models_dir = tmp_path / "models"  # fresh: dbt never ran in it
    shutil.copytree(DEFAULT_MODELS_DIR, models_dir, ignore=shutil.ignore_patterns("target", "dbt_packages", "logs"))
    shutil.copytree(OFFLINE_DBT_UTILS, models_dir / "dbt_packages" / "dbt_utils")
    before = files_under(models_dir)
    settings = Settings(models_dir=models_dir, models_runner="dbt", analytics_as_of=dbt_run.as_of.isoformat())
    assert settings.data_dir == tmp_path / "data"  # the default, made absolute when the settings are read
    analytics = build_analytics(settings)
    models = {asset_key(m) for m in dbt_run.project.models.values()}
    assert set(analytics.models.keys) == models
    assert {tuple(analytics.models.specs_by_key[k].owners) for k in models} == {tuple(OWNERS)}
    # Started once the definitions are built, as a run's raw step starts it: dagster-dbt changes the process's
    # working directory while `dbt parse` is prepared, which a mirror writing beside it would follow.
    monkeypatch.setenv("LESSONSYNC_TABLE_FORMAT", "iceberg")
    mirrored = Warehouse.from_settings(load_settings(data_dir=Path("data")))
    with mirrored.connect() as conn:
        worker = MirrorWorker.start(mirrored, conn)
    assert worker is not None
    awaited = threading.Event()

    def hold_until_awaited(point: str) -> None:  # the mirror's first table ends only once a step waits for it
        if point == "background_mirror_awaited":
            awaited.set()
        elif point.startswith("background_mirrored:"):
            awaited.wait(60)

    hooks.on_point(hold_until_awaited)
    worker.committed(["active_lessons"])
    worker.finish()
    result = materialize(
        [*analytics.assets, *analytics.checks],
        resources={"warehouse": WarehouseResource(data_dir=str(settings.data_dir))},
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    hooks.on_point(None)
    background = await_background_mirror(mirrored.path, collect=True)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    assert awaited.is_set()
    assert background is not None and background.failed == {} and "lms.active_lessons" in background.written
    assert {e.asset_key for e in result.get_asset_materialization_events()} == models | {PUBLISHED_KEY}
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == sum(len(m.tests) for m in dbt_run.project.models.values()) + 1
    assert all(e.passed for e in evaluations)
    warehouse = tmp_path / "data" / "warehouse.duckdb"
    assert_same_marts(dbt_run.project, dbt_run.product, warehouse)
    with duckdb.connect(str(tmp_path / "data" / "analytics.duckdb"), read_only=True) as snapshot:
        builds = dict(snapshot.execute("SELECT model, as_of FROM _builds").fetchall())
    assert set(builds) == set(dbt_run.project.models) and set(builds.values()) == {dbt_run.as_of}
    assert (tmp_path / "data" / "dbt_target" / "manifest.json").exists()

    assert files_under(models_dir) == before  # no target/, logs/, data/, nor any file changed
    summary = {
        e.asset_key.to_user_string(): {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
    }
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        counts = {m: conn.execute(f"SELECT count(*) FROM analytics.{quote(m)}").fetchone()[0] for m in builds}
    assert {
        k.split("/")[-1]: v["dagster/row_count"] for k, v in summary.items() if k != "analytics/published"
    } == counts
    assert sum(counts.values()) > 0, "the models hold rows: comparing zeros would prove nothing"
    models_line = " ".join(summary_lines(summary))
    assert f"learner_progress {counts['learner_progress']:,}" in models_line and "published" not in models_line


def test_the_dagster_dbt_runner_loads_when_dbt_cannot_parse_and_its_build_says_why(tmp_path: Path) -> None:
    """A model dbt cannot parse does not take the code location down (nor its schedule, sensor and jobs): the
    models are assets, and building them fails with dbt's error naming the model."""
    models_dir = tmp_path / "models"
    shutil.copytree(DEFAULT_MODELS_DIR, models_dir, ignore=shutil.ignore_patterns("target", "dbt_packages", "logs"))
    shutil.copytree(OFFLINE_DBT_UTILS, models_dir / "dbt_packages" / "dbt_utils")
    (models_dir / "marts" / "unparsable.sql").write_text("select 1 as x\n{% if %}\n")
    settings = Settings(data_dir=tmp_path / "data", models_dir=models_dir, models_runner="dbt")
    analytics = build_analytics(settings)
    assert AssetKey(["analytics", "unparsable"]) in analytics.models.keys
    result = materialize(
        analytics.assets,
        resources={"warehouse": WarehouseResource(data_dir=str(settings.data_dir))},
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "dbt parse of" in str(failure.event_specific_data.error)
    assert "Compilation Error in model unparsable" in str(failure.event_specific_data.error)


LOADED = "TIMESTAMPTZ '2099-01-01 00:00:00+00'"  # after every load of the synced warehouse, the same in both copies
CHANGE = (  # new exit-quiz answers (an attempt 100) of a few learners, and their progress records moved on
    f"INSERT INTO lms.answers SELECT * REPLACE (attempt_index + 100 AS attempt_index, {LOADED} AS first_loaded_at, "
    f"{LOADED} AS last_loaded_at) FROM lms.answers WHERE quiz_type = 'exit' AND hash(user_id, lesson_id) % 5 = 0",
    f"UPDATE lms.active_lessons SET time_spent = coalesce(time_spent, 0) + 1, last_loaded_at = {LOADED} "
    "WHERE hash(user_id, lesson_id) % 5 = 0",
)


def test_the_incremental_model_runs_incrementally_under_dbt_as_under_ours(dbt_run: DbtRun, tmp_path: Path) -> None:
    """learner_progress's SQL with is_incremental() true, run by dbt-duckdb's incremental materialization (delete+insert
    on unique_key) and by LessonSync's runner after the same change: the same table, which a full build equals."""
    ours, theirs, scratch = tmp_path / "ours.duckdb", tmp_path / "theirs.duckdb", tmp_path / "scratch.duckdb"
    shutil.copy2(dbt_run.product, ours)
    shutil.copy2(dbt_run.dbt, theirs)
    for path in (ours, theirs):
        with duckdb.connect(str(path)) as conn:
            for statement in CHANGE:
                conn.execute(statement)
            if path == ours:  # what a load records with its rows: the tables' content versions move
                record_load(conn, {"answers": {"inserted": 1}, "active_lessons": {"updated": 1}})
    ran = dbt(
        dbt_run.project_dir, "run", "--select", "learner_progress", "--vars", as_of_var(dbt_run.as_of), warehouse=theirs
    )
    assert ran.returncode == 0, ran.stdout[-3000:]
    target = dbt_run.project_dir / "target"
    assert "changed_pairs" in next((target / "compiled").rglob("learner_progress.sql")).read_text()
    assert "delete from" in next((target / "run").rglob("learner_progress.sql")).read_text()  # delete+insert
    with duckdb.connect(str(ours)) as conn:
        results = {r.model.name: r for r in build_models(conn, dbt_run.project, as_of=dbt_run.as_of)}
    progress = results["learner_progress"]
    assert progress.replaced is not None and 0 < progress.replaced < progress.rows
    shutil.copy2(ours, scratch)
    with duckdb.connect(str(scratch)) as conn:
        assert {r.status for r in build_models(conn, dbt_run.project, as_of=dbt_run.as_of, full_refresh=True)} == {
            "built"
        }
    for one, other in ((ours, theirs), (ours, scratch)):
        with duckdb.connect() as conn:
            conn.execute(f"ATTACH '{one}' AS a (READ_ONLY)")
            conn.execute(f"ATTACH '{other}' AS b (READ_ONLY)")
            for x, y in (("a", "b"), ("b", "a")):
                extra = conn.execute(
                    f"SELECT * FROM {x}.analytics.learner_progress EXCEPT ALL SELECT * FROM {y}.analytics.learner_progress"
                ).fetchall()
                assert extra == [], f"{other.name}: {extra[:3]}"
