"""The Iceberg mirror over real syncs (pipeline/warehouse/lake/iceberg.py): after full, incremental and no-change syncs,
and after a sync SIGKILLed between a DuckDB commit and its Iceberg commit, every raw table and every mart read
through pyiceberg and polars equals the warehouse; a sync that changes nothing writes no snapshot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import DagsterInstance
from iceberg_helpers import ICEBERG_ENV, assert_iceberg_equals_warehouse, assert_marts_equal, open_catalog
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.settings import Settings, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.warehouse.duck.tabledef import SCHEMA
from pipeline.warehouse.lake.iceberg import MARTS_NAMESPACE

WORKER = Path(__file__).with_name("sync_kill_worker.py")
pytestmark = pytest.mark.slow


def settings_of(stack: Stack) -> Settings:
    with environment(stack.run_env()):
        return load_settings()


def snapshot_ids(settings: Settings) -> dict[str, int | None]:
    catalog = open_catalog(settings)
    ids = {}
    for namespace in (SCHEMA, MARTS_NAMESPACE):
        for identifier in catalog.list_tables(namespace):
            snapshot = catalog.load_table(identifier).current_snapshot()
            ids[".".join(identifier)] = snapshot.snapshot_id if snapshot else None
    return ids


def test_raw_tables_and_marts_equal_the_warehouse_after_full_incremental_and_no_change_syncs(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        full = stack.sync()
        assert full.success, full.error
        settings = settings_of(stack)
        rows = assert_iceberg_equals_warehouse(settings)
        assert rows["answers"] > 0 and rows["groups"] > 0
        marts = [name for (_, name) in open_catalog(settings).list_tables(MARTS_NAMESPACE)]
        assert len(marts) >= 5
        assert_marts_equal(settings, marts)

        stack.advance(hours=24)
        assert stack.sync().success
        assert_warehouse_equals_platform(stack)
        assert_iceberg_equals_warehouse(settings)
        assert_marts_equal(settings, marts)

        before = snapshot_ids(settings)
        assert stack.sync(select=RAW).success  # nothing changed on the platform
        assert snapshot_ids(settings) == before

        assert stack.run_job("lake_maintenance").success
        assert_iceberg_equals_warehouse(settings)
        env = {**os.environ, **stack.run_env()}
        shown = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "tables", "show"], env=env, capture_output=True, text=True
        )
        assert shown.returncode == 0, shown.stderr
        assert "lms.answers" in shown.stdout and "analytics." in shown.stdout
        synced = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "tables", "sync"], env=env, capture_output=True, text=True
        )
        assert synced.returncode == 0, synced.stderr
        assert "0 written" in synced.stdout  # everything was up to date already
        assert "pyiceberg" not in shown.stderr + synced.stderr  # its INFO lines (a FileIO per table) are noise


def test_a_sync_killed_between_the_two_commits_is_rolled_forward_by_the_next(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env.update(ICEBERG_ENV)
        home = tmp_path / "dagster_home"
        home.mkdir()
        env = {**os.environ, **stack.run_env(), "DAGSTER_HOME": str(home), "PYTHONPATH": str(WORKER.parents[2])}
        # killed right after the first load's DuckDB COMMIT, before its Iceberg commit
        killed = subprocess.run(
            [sys.executable, str(WORKER), "committed:1", "--select", "key:lms/*"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
        settings = settings_of(stack)
        rerun = stack.sync(instance=DagsterInstance.ephemeral(), select=RAW)
        assert rerun.success, rerun.error
        assert_warehouse_equals_platform(stack)
        assert_iceberg_equals_warehouse(settings)


def test_a_column_the_platform_began_sending_reaches_the_iceberg_table(tmp_path):
    """The warehouse's new column (docs/schema-evolution.md) is added to the Iceberg table's schema, its values there."""
    with local_stack(
        tmp_path / "data", scale="tiny", new_fields=[("active_lessons", "quizTimeSeconds", "int")]
    ) as stack:
        stack.env.update(ICEBERG_ENV)
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)
        assert stack.sync(select=RAW).success
        settings = settings_of(stack)
        assert_iceberg_equals_warehouse(settings)
        ice = open_catalog(settings).load_table((SCHEMA, "active_lessons"))
        assert str(ice.schema().find_field("quiz_time_seconds").field_type) == "long"
        values = ice.scan(selected_fields=("quiz_time_seconds",)).to_arrow().column(0).drop_null().to_pylist()
        sent = [r["quizTimeSeconds"] for r in stack.sim.ground_truth("active_lessons") if "quizTimeSeconds" in r]
        assert sorted(values) == sorted(sent) and sent
