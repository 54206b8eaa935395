"""The nightly sync in-process (`lessonsync sync`, the demo) is two runs of `nightly_sync`: the loads, then the models
whose inputs changed with the publish and the marts' mirror. Dagster plans every asset and check of a run when it
creates it, so the second run plans only the models a build works on: none after a sync that changed nothing, those
reading what changed after the platform moved on; the others keep their last build."""

from typing import Any

import duckdb
import pytest
from dagster import DagsterEventType, DagsterInstance
from stack_helpers import assert_warehouse_equals_platform

from pipeline.analytics import BUILDS_TABLE, load_project
from pipeline.stack import Stack, local_stack
from pipeline.sync import SyncReport

# What the models run writes whatever changed: the publish and the Iceberg mirrors (the raw tables' finishes there,
# while the models build)
DERIVED = {"analytics/published", "lake/iceberg_tables", "lake/iceberg_marts"}


def planned(instance: DagsterInstance, run_id: str) -> tuple[set[str], set[str]]:
    """The assets and the asset checks (`asset:check`) the run planned when it was created."""
    assets = {
        e.dagster_event.asset_key.to_user_string()
        for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
        if e.dagster_event is not None and e.dagster_event.asset_key is not None
    }
    checks = set()
    for e in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED):
        data: Any = e.dagster_event.event_specific_data if e.dagster_event is not None else None
        checks.add(f"{data.asset_key.to_user_string()}:{data.check_name}")
    return assets, checks


def builds(stack: Stack) -> dict[str, Any]:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return dict(conn.execute(f"SELECT model, built_at FROM {BUILDS_TABLE}").fetchall())


def synced(stack: Stack, instance: DagsterInstance) -> SyncReport:
    report = stack.sync(instance=instance)
    assert report.success, report.error
    assert report.models_run_id is not None and report.models_run_id != report.run_id
    return report


@pytest.mark.slow
def test_the_models_run_plans_only_the_models_whose_inputs_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("LESSONSYNC_TABLE_FORMAT", "iceberg")  # the default (the suite's is none)
    instance = DagsterInstance.ephemeral()
    models = {f"analytics/{name}" for name in load_project().models}
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        first = synced(stack, instance)
        loads, load_checks = planned(instance, first.run_id)
        assert loads and all(key.startswith("lms/") for key in loads)
        assert all(check.startswith("lms/") for check in load_checks)
        derived = planned(instance, first.models_run_id)[0] - models
        assert derived == DERIVED
        # the raw tables' mirror step collects the background mirror after the models built beside it
        started = [e.step_key for e in instance.all_logs(first.models_run_id, of_type=DagsterEventType.STEP_START)]
        assert started.index("analytics_models") < started.index("lake__iceberg_tables")
        assert "lake/iceberg_tables" in first.materializations
        assert planned(instance, first.models_run_id)[0] == models | derived  # a first sync builds every model
        assert first.models_up_to_date == 0

        before = builds(stack)
        again = synced(stack, instance)  # nothing changed on the platform
        assets, checks = planned(instance, again.models_run_id)
        assert assets == derived and checks == {"analytics/published:published_files_consistent"}
        assert again.models_up_to_date == len(models)
        assert "analytics/published" in again.materializations  # what the loads saw again is published
        assert builds(stack) == before

        stack.advance(hours=24)  # the platform moves on, and the build's as_of with it
        moved = synced(stack, instance)
        assets, checks = planned(instance, moved.models_run_id)
        chosen = assets - derived
        assert {"analytics/stg_active_lessons", "analytics/certificates"} <= chosen  # changed rows; as_of moved
        assert chosen < models and moved.models_up_to_date == len(models - chosen)
        assert all(check.split(":")[0] in chosen | derived for check in checks)  # only the chosen models' tests
        built = {key for key in moved.materializations if key in models}
        assert built <= chosen
        after = builds(stack)
        kept = {name for name in before if f"analytics/{name}" not in chosen}
        assert kept and all(after[name] == before[name] for name in kept)  # their last build stands
        assert all(after[key.split("/")[1]] != before[key.split("/")[1]] for key in built)
        assert_warehouse_equals_platform(stack)

        stack.advance(hours=24)
        stopped = stack.sync(instance=instance, stopping=lambda: True)  # SIGTERM came while the loads ran
        assert not stopped.success and stopped.error == "stopped before the models run"
        assert stopped.models_run_id is None and "lms/active_lessons" in stopped.materializations
