"""A build costs what changed: a model whose inputs did not change since its last build is not rebuilt, a change
rebuilds exactly what reads it, and what it rebuilds (incremental learner_progress included) equals a build from
scratch of the same warehouse. Changes are made by real loads (Warehouse.load, as a sync commits them) on copies of
the suite's synced tiny warehouse (tests/conftest.py `synced_tiny`)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from dagster import AssetKey, DagsterInstance

from pipeline.analytics.build import BUILDS_TABLE, ModelResult, build_models, models_to_build
from pipeline.analytics.models import DEFAULT_MODELS_DIR, AnalyticsProject, load_project
from pipeline.analytics.sql import quote
from pipeline.contract.tables import TABLES
from pipeline.settings import load_settings
from pipeline.stack import environment
from pipeline.sync import run_sync
from pipeline.warehouse import Warehouse

pytestmark = pytest.mark.slow  # the suite's tiny sync (shared, ~40 s once per session)

TIME_RELATIVE = {"certificates", "certificates_by_badge"}  # reads var('as_of'), and what reads it


@dataclass
class Built:
    data_dir: Path
    as_of: datetime

    @property
    def warehouse(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    def build(self, project: AnalyticsProject, **options: Any) -> dict[str, ModelResult]:
        options.setdefault("as_of", self.as_of)
        with duckdb.connect(str(self.warehouse)) as conn:
            return {r.model.name: r for r in build_models(conn, project, **options)}

    def planned(self, project: AnalyticsProject, as_of: datetime | None = None) -> set[str]:
        """What `models_to_build` says a build now would build or test again (read-only)."""
        with duckdb.connect(str(self.warehouse), read_only=True) as conn:
            return set(models_to_build(conn, project, as_of or self.as_of))

    def builds(self) -> dict[str, tuple[datetime, str]]:
        with duckdb.connect(str(self.warehouse), read_only=True) as conn:
            return {
                m: (at, inputs)
                for m, at, inputs in conn.execute(f"SELECT model, built_at, inputs FROM {BUILDS_TABLE}").fetchall()
            }

    def load(self, table: str, rows: pa.Table, **commit: Any) -> None:
        """`rows` of `table` committed by a load, as a sync commits them (the lake of this copy)."""
        warehouse = Warehouse(self.warehouse, self.data_dir / "lake")
        with warehouse.load(table, "test-change", datetime.now(UTC)) as load:
            load.write(TABLES[table], rows)
            load.commit(replace_children_of={}, **commit)

    def load_together(self, tables: dict[str, pa.Table]) -> None:
        """Tables pulled whole by one load (rows they no longer have are marked deleted)."""
        warehouse = Warehouse(self.warehouse, self.data_dir / "lake")
        with warehouse.load(next(iter(tables)), "test-change", datetime.now(UTC)) as load:
            for table, rows in tables.items():
                load.write(TABLES[table], rows)
            load.commit(replace_children_of={}, complete_snapshots=list(tables))

    def rows(self, table: str, where: str = "true") -> pa.Table:
        """Rows of the raw table `table` as its spec types them (a load's batch)."""
        spec = TABLES[table]
        columns = ", ".join(quote(name) for name in spec.schema.names)
        with duckdb.connect(str(self.warehouse), read_only=True) as conn:
            table_ = conn.sql(f"SELECT {columns} FROM lms.{table} WHERE {where} ORDER BY ALL").to_arrow_table()
        return table_.cast(spec.schema)


@pytest.fixture(scope="module")
def built_once(synced_tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A copy of the synced tiny data directory with every model built."""
    data_dir = tmp_path_factory.mktemp("built_once") / "data"
    shutil.copytree(synced_tiny.data_dir, data_dir)
    built = Built(data_dir, synced_tiny.sim.now())
    assert {r.status for r in built.build(load_project()).values()} == {"built"}
    return built


@pytest.fixture
def built(built_once: Built, tmp_path: Path) -> Built:
    data_dir = tmp_path / "data"
    shutil.copytree(built_once.data_dir, data_dir)
    return Built(data_dir, built_once.as_of)


def rebuilt(results: dict[str, ModelResult]) -> set[str]:
    assert {r.status for r in results.values()} <= {"built", "unchanged"}, [r.error for r in results.values()]
    return {name for name, r in results.items() if r.status == "built"}


def worked_on(results: dict[str, ModelResult]) -> set[str]:
    """The models a build built or tested again (an unchanged model whose tests read something that changed)."""
    return {name for name, r in results.items() if r.status == "built" or r.outcomes}


def assert_marts_equal_a_build_from_scratch(built: Built, project: AnalyticsProject, tmp_path: Path) -> None:
    """Every model of `built` equals the one a full build of the same warehouse makes (all columns, all rows)."""
    scratch = Built(tmp_path / "scratch", built.as_of)
    shutil.copytree(built.data_dir, scratch.data_dir)
    with duckdb.connect(str(scratch.warehouse)) as conn:
        conn.execute("DROP SCHEMA analytics CASCADE")
    assert {r.status for r in scratch.build(project).values()} == {"built"}
    with duckdb.connect() as conn:
        conn.execute(f"ATTACH '{built.warehouse}' AS ours (READ_ONLY)")
        conn.execute(f"ATTACH '{scratch.warehouse}' AS scratch (READ_ONLY)")
        for model in project.models:
            ours, theirs = f"ours.analytics.{quote(model)}", f"scratch.analytics.{quote(model)}"
            assert conn.execute(f"DESCRIBE {ours}").fetchall() == conn.execute(f"DESCRIBE {theirs}").fetchall()
            for a, b in ((ours, theirs), (theirs, ours)):
                extra = conn.execute(f"SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b} LIMIT 3").fetchall()
                assert extra == [], f"{model}: rows in {a} only: {extra}"


def valid_until(built: Built) -> datetime:
    with duckdb.connect(str(built.warehouse), read_only=True) as conn:
        until: datetime = conn.execute(
            f"SELECT valid_until FROM {BUILDS_TABLE} WHERE model = 'certificates'"
        ).fetchall()[0][0]
    return until


def certificate_states(built: Built) -> list[tuple[Any, ...]]:
    """The certificates mart but its as_of column, in order."""
    with duckdb.connect(str(built.warehouse), read_only=True) as conn:
        return conn.execute("SELECT * EXCLUDE (as_of) FROM analytics.certificates ORDER BY certificate_id").fetchall()


def test_a_build_with_nothing_changed_rebuilds_nothing_until_the_certificates_change_with_as_of(built: Built) -> None:
    """certificates reads as_of: a build before its valid_until (the first instant a certificate expires or enters
    its last 30 days) keeps it and what reads it; a build at that instant rebuilds them."""
    project = load_project()
    before = built.builds()
    assert built.planned(project) == set()
    assert rebuilt(built.build(project)) == set()
    assert built.builds() == before
    until = valid_until(built)
    assert built.as_of < until < built.as_of + timedelta(days=3650)  # the world has certificates that expire
    just_before = until - timedelta(seconds=1)
    assert built.planned(project, just_before) == set()
    assert rebuilt(built.build(project, as_of=just_before)) == set()
    assert built.builds() == before
    assert built.planned(project, until) == TIME_RELATIVE
    assert rebuilt(built.build(project, as_of=until)) == TIME_RELATIVE
    after = built.builds()
    assert {m for m in before if after[m] != before[m]} == TIME_RELATIVE
    assert valid_until(built) > until


def test_a_kept_certificates_mart_holds_the_rows_a_build_would_give_and_the_next_instant_changes_them(
    built: Built, tmp_path: Path
) -> None:
    """Exactness of keeping it: built from scratch one second before valid_until, the mart's rows are those kept
    (but for as_of); built at valid_until, they differ."""
    project = load_project()
    kept, until = certificate_states(built), valid_until(built)
    for as_of, same in ((until - timedelta(seconds=1), True), (until, False)):
        scratch = Built(tmp_path / f"scratch-{same}", as_of)
        shutil.copytree(built.data_dir, scratch.data_dir)
        assert rebuilt(scratch.build(project, full_refresh=True)) == set(project.models)
        assert (certificate_states(scratch) == kept) is same


@pytest.mark.parametrize("change", ["progress", "new_answer", "lesson_renamed", "lesson_removed"])
def test_a_change_rebuilds_exactly_what_reads_it_and_equals_a_full_build(
    built: Built, tmp_path: Path, change: str
) -> None:
    project = load_project()
    if change == "progress":  # one progress record moves on
        row = built.rows("active_lessons", "lesson_id = (SELECT min(lesson_id) FROM lms.active_lessons)").slice(0, 1)
        row = row.set_column(
            row.schema.get_field_index("time_spent"), "time_spent", pc.add(row["time_spent"].fill_null(0), 1)
        )
        built.load("active_lessons", row)
        changed = {"active_lessons"}
    elif change == "new_answer":  # a new exit-quiz attempt at a question: one answer
        row = built.rows("answers", "quiz_type = 'exit'").slice(0, 1)
        attempt = row.schema.get_field_index("attempt_index")
        row = row.set_column(attempt, "attempt_index", pc.add(row["attempt_index"], 100))
        built.load("answers", row)
        changed = {"answers"}
    else:  # the catalogue's lessons pulled whole: one renamed, or one gone (marked deleted)
        lessons = built.rows("lessons", "deleted_at IS NULL")
        first = lessons["id"][0].as_py()
        if change == "lesson_renamed":
            titles = pc.if_else(pc.equal(lessons["id"], first), pa.scalar("Renamed"), lessons["title"])
            lessons = lessons.set_column(lessons.schema.get_field_index("title"), "title", titles)
            built.load("lessons", lessons, complete_snapshots=["lessons"])
            changed = {"lessons"}
        else:  # its questions go with it, as a sync pulls both whole
            lessons = lessons.filter(pc.not_equal(lessons["id"], first))
            questions = built.rows("lesson_questions", f"deleted_at IS NULL AND lesson_id <> '{first}'")
            built.load_together({"lessons": lessons, "lesson_questions": questions})
            changed = {"lessons", "lesson_questions"}
    planned = built.planned(project)
    results = built.build(project)
    assert planned == worked_on(results)  # the run after the loads selects exactly what the build works on
    readers = {m.name for m in project.models.values() if any(d.schema == "lms" and d.name in changed for d in m.deps)}
    expected = readers | {d for m in readers for d in project.downstream_of(m)}
    assert "learner_progress" in expected
    assert rebuilt(results) == expected
    progress = results["learner_progress"]
    assert progress.replaced is not None and 0 < progress.replaced < progress.rows  # incremental: a few pairs
    if change == "new_answer":  # one record's rows of the intermediate recomputed (each of its questions)
        firsts = results["int_first_attempts"]
        assert firsts.replaced is not None and 0 < firsts.replaced < firsts.rows
    if change == "lesson_renamed":  # its relationships test reads stg_lessons: tested again, not rebuilt
        questions = results["stg_lesson_questions"]
        assert questions.status == "unchanged" and questions.outcomes and all(o.passed for o in questions.outcomes)
    assert_marts_equal_a_build_from_scratch(built, project, tmp_path)


def test_a_code_change_rebuilds_the_model_and_its_descendants(built: Built, tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(DEFAULT_MODELS_DIR, models, ignore=shutil.ignore_patterns("target", "dbt_packages", "logs"))
    staging = models / "staging" / "stg_lessons.sql"
    staging.write_text(staging.read_text().replace("title as lesson_title", "upper(title) as lesson_title"))
    project = load_project(models)
    planned = built.planned(project)
    results = built.build(project)
    assert planned == worked_on(results)
    assert rebuilt(results) == {"stg_lessons"} | project.downstream_of("stg_lessons")
    assert results["learner_progress"].replaced is None  # built whole: its upstream code changed
    assert_marts_equal_a_build_from_scratch(built, project, tmp_path)


def test_full_refresh_rebuilds_every_model(built: Built) -> None:
    project = load_project()
    results = built.build(project, full_refresh=True)
    assert rebuilt(results) == set(project.models)
    assert results["learner_progress"].replaced is None


def test_builds_recorded_before_inputs_were_are_migrated_in_place(built: Built) -> None:
    """A warehouse whose analytics._builds predates the inputs and valid_until columns: they are added, each model is
    built once more (nothing says what its build read), then skipped while nothing changes."""
    with duckdb.connect(str(built.warehouse)) as conn:
        for column in ("inputs", "code_inputs", "tested_inputs", "valid_until"):
            conn.execute(f"ALTER TABLE {BUILDS_TABLE} DROP COLUMN {column}")
    project = load_project()
    assert rebuilt(built.build(project)) == set(project.models)
    assert rebuilt(built.build(project)) == set()
    assert all(inputs for _, inputs in built.builds().values())


def test_a_no_change_sync_rebuilds_no_model(synced_tiny: Any, tmp_path: Path) -> None:
    """`lessonsync sync` twice on an unchanged platform, as_of moved on between them but not past the certificates'
    valid_until: the second rebuilds no model; every model is left out of the models run and keeps its Dagster data
    version. (At valid_until the time-relative models are rebuilt: the build tests above.)"""
    data_dir = tmp_path / "data"
    shutil.copytree(synced_tiny.data_dir, data_dir)
    env = {**synced_tiny.run_env(), "LESSONSYNC_DATA_DIR": str(data_dir)}
    instance = DagsterInstance.ephemeral()
    with environment(env):
        assert run_sync(load_settings(), instance=instance).success
    built = Built(data_dir, synced_tiny.sim.now())
    before = built.builds()
    versions = data_versions(instance, list(before))
    later = valid_until(built) - timedelta(seconds=1)
    assert later > synced_tiny.sim.now() + timedelta(hours=1)
    with environment({**env, "LESSONSYNC_ANALYTICS_AS_OF": later.isoformat()}):
        report = run_sync(load_settings(), instance=instance)
    assert report.success
    assert built.builds() == before
    assert data_versions(instance, list(before)) == versions
    # a model left out of the models run keeps its last materialization (and data version)
    assert report.models_run_id is not None and report.models_up_to_date == len(before)
    logs = instance.all_logs(report.models_run_id)
    planned = {
        e.dagster_event.asset_key.path[-1]
        for e in logs
        if e.dagster_event is not None and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION_PLANNED"
    }
    assert planned & set(before) == set()


def data_versions(instance: DagsterInstance, models: list[str]) -> dict[str, str | None]:
    """The data version Dagster holds for each model's latest materialization."""
    versions = {}
    for model in models:
        event = instance.get_latest_materialization_event(AssetKey(["analytics", model]))
        assert event is not None and event.asset_materialization is not None
        versions[model] = event.asset_materialization.tags.get("dagster/data_version")
    assert all(versions.values())
    return versions
