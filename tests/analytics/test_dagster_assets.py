"""Real Dagster execution of the analytics assets and their checks against a warehouse file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from analytics_world import AS_OF, record_load, seed_small_world
from dagster import AssetKey, DagsterInstance, Definitions, materialize

from pipeline.analytics.build import build_models
from pipeline.analytics.models import AnalyticsProject
from pipeline.analytics.publish import publish
from pipeline.defs.analytics.assets import PUBLISHED_KEY, build_analytics
from pipeline.defs.policy import CURSOR_WINDOW, FULL_REFRESH_WINDOW
from pipeline.defs.resources import WarehouseResource
from pipeline.settings import load_settings

ANALYTICS = build_analytics(load_settings())
analytics_assets, analytics_checks = ANALYTICS.assets, ANALYTICS.checks

RUN_CONFIG = {"ops": {"analytics_models": {"config": {"as_of": AS_OF.isoformat()}}}}


@pytest.fixture
def seeded(data_dir: Path) -> Path:
    conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
    seed_small_world(conn)
    conn.close()
    return data_dir


def run(data_dir: Path, selection=None, run_config=RUN_CONFIG):
    return materialize(
        [*analytics_assets, *analytics_checks],
        resources={"warehouse": WarehouseResource(data_dir=str(data_dir))},
        run_config=run_config,
        selection=selection,
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def materialized(result) -> set[AssetKey]:
    return {e.asset_key for e in result.get_asset_materialization_events()}


def checks(result) -> dict[str, bool]:
    return {f"{e.asset_key.path[-1]}.{e.check_name}": e.passed for e in result.get_asset_check_evaluations()}


@pytest.mark.slow
def test_everything_builds_publishes_and_passes_its_checks(seeded: Path, project: AnalyticsProject) -> None:
    result = run(seeded)
    assert result.success
    assert materialized(result) == {AssetKey(["analytics", n]) for n in project.models} | {PUBLISHED_KEY}
    evaluations = checks(result)
    assert len(evaluations) == sum(len(m.tests) for m in project.models.values()) + 1
    assert all(evaluations.values()), [k for k, ok in evaluations.items() if not ok]
    assert evaluations["published.published_files_consistent"]
    funnel = result.asset_materializations_for_node("analytics_models")
    metadata = next(m.metadata for m in funnel if m.asset_key == AssetKey(["analytics", "lesson_funnel"]))
    assert metadata["dagster/row_count"].value == 3 and metadata["as_of"].value == AS_OF.isoformat()
    assert (seeded / "analytics.duckdb").exists() and (seeded / "marts" / "lesson_funnel.parquet").exists()


def build_and_publish_directly(data_dir: Path, project: AnalyticsProject) -> None:
    """A previous successful build, made without Dagster (quicker)."""
    conn = duckdb.connect(str(data_dir / "warehouse.duckdb"))
    assert {r.status for r in build_models(conn, project, as_of=AS_OF)} == {"built"}
    publish(conn, project, data_dir)
    conn.close()


@pytest.mark.slow
def test_failing_check_skips_only_downstream_and_the_rest_is_published(seeded: Path, project: AnalyticsProject) -> None:
    build_and_publish_directly(seeded, project)
    conn = duckdb.connect(str(seeded / "warehouse.duckdb"))
    conn.execute("UPDATE lms.lesson_sessions SET status = 'archived' WHERE id = 'S1'")
    record_load(conn, {"lesson_sessions": {"updated": 1}})
    conn.close()
    published_before = (seeded / "analytics.duckdb").stat().st_mtime_ns

    result = run(seeded)
    assert not result.success
    evaluations = checks(result)
    assert evaluations["stg_lesson_sessions.accepted_values__session_status"] is False
    keys = materialized(result)
    assert AssetKey(["analytics", "session_attendance"]) not in keys
    assert AssetKey(["analytics", "stg_lesson_sessions"]) not in keys
    assert PUBLISHED_KEY in keys
    # lesson_funnel does not read lesson_sessions: unchanged, neither rebuilt nor materialized, and published
    published = next(
        m for m in result.asset_materializations_for_node("analytics_models") if m.asset_key == PUBLISHED_KEY
    )
    assert "lesson_funnel" in published.metadata["models_unchanged"].value
    assert AssetKey(["analytics", "lesson_funnel"]) not in keys
    assert (seeded / "analytics.duckdb").stat().st_mtime_ns != published_before
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = str(failure.event_specific_data.error)
    assert "accepted_values__session_status" in message and "model session_attendance skipped" in message


@pytest.mark.slow
def test_a_subset_builds_only_what_was_selected(seeded: Path, project: AnalyticsProject) -> None:
    build_and_publish_directly(seeded, project)
    full_refresh = {"ops": {"analytics_models": {"config": {"as_of": AS_OF.isoformat(), "full_refresh": True}}}}
    result = run(seeded, selection=[AssetKey(["analytics", "lesson_funnel"])], run_config=full_refresh)
    assert result.success
    assert materialized(result) == {AssetKey(["analytics", "lesson_funnel"])}
    assert set(checks(result)) == {
        "lesson_funnel.unique__lesson_id",
        "lesson_funnel.not_null__lesson_id",
        "lesson_funnel.not_null__learners",
    }


@pytest.mark.parametrize(("window", "rebuilt"), [(CURSOR_WINDOW, False), (FULL_REFRESH_WINDOW, True)])
def test_the_full_refresh_job_rebuilds_an_unchanged_model(
    seeded: Path, project: AnalyticsProject, window: dict[str, str], rebuilt: bool
) -> None:
    """A run tagged as the full_refresh job's runs are rebuilds the models its inputs left unchanged; the nightly
    sync's skips them."""
    build_and_publish_directly(seeded, project)
    result = materialize(
        analytics_assets,
        resources={"warehouse": WarehouseResource(data_dir=str(seeded))},
        run_config=RUN_CONFIG,
        selection=[AssetKey(["analytics", "lesson_funnel"])],
        instance=DagsterInstance.ephemeral(),
        tags=window,
    )
    funnel = result.asset_materializations_for_node("analytics_models")
    # a skipped model is not materialized: its last build, and data version, stand
    assert [m.metadata["build"].value for m in funnel] == (["full"] if rebuilt else [])


def test_bad_as_of_fails_with_what_to_do(seeded: Path) -> None:
    result = run(seeded, run_config={"ops": {"analytics_models": {"config": {"as_of": "2026-11-22T00:00:00"}}}})
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "has no UTC offset; add Z or +hh:mm, or give a date" in str(failure.event_specific_data.error)


CERTIFICATES = [AssetKey(["analytics", "stg_certificates"]), AssetKey(["analytics", "certificates"])]


@pytest.mark.parametrize("given", ["2026-11-02", "2026-11-02 00:00:00+00", "2026-11-02T00:00:00Z"])
@pytest.mark.parametrize("where", ["environment", "run config"])
def test_as_of_may_be_a_date_or_a_timestamp_as_dbt_users_write_it(
    seeded: Path, monkeypatch: pytest.MonkeyPatch, where: str, given: str
) -> None:
    """LESSONSYNC_ANALYTICS_AS_OF or the run config's as_of: a date is midnight UTC; the time-relative mart and its
    materialization are built for that instant."""
    monkeypatch.setenv("LESSONSYNC_ANALYTICS_AS_OF", given if where == "environment" else "")
    analytics = build_analytics(load_settings())
    result = materialize(
        analytics.assets,
        resources={"warehouse": WarehouseResource(data_dir=str(seeded))},
        run_config={"ops": {"analytics_models": {"config": {"as_of": given}}}} if where == "run config" else None,
        selection=CERTIFICATES,
        instance=DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert result.success
    instant = datetime(2026, 11, 2, tzinfo=UTC)
    built = result.asset_materializations_for_node("analytics_models")
    assert {m.metadata["as_of"].value for m in built} == {instant.isoformat()}
    with duckdb.connect(str(seeded / "warehouse.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT DISTINCT as_of FROM analytics.certificates").fetchall() == [(instant,)]


def test_definitions_load_with_the_lms_upstreams(project: AnalyticsProject) -> None:
    defs = Definitions(
        assets=analytics_assets,
        asset_checks=analytics_checks,
        resources={"warehouse": WarehouseResource(data_dir="unused")},
    )
    graph = defs.resolve_asset_graph()
    funnel = graph.get(AssetKey(["analytics", "stg_answers"]))
    assert funnel.parent_keys == {AssetKey(["lms", "answers"])}
    assert graph.get(AssetKey(["analytics", "lesson_funnel"])).group_name == "analytics"
