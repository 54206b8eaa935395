"""bench/sync_bench.py's `--dagster-storage sqlite`: the sync child runs on the persistent instance of its
DAGSTER_HOME, as `lessonsync sync` does, so its figures include the runs' event writes. Never timed."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus

from bench.sync_bench import STORAGE_ENV, _sync_env, run_sync_child
from simulator import SimulatorConfig, start_simulator


def test_the_sqlite_storage_keeps_the_childs_run_in_its_dagster_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORAGE_ENV, "sqlite")
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as sim:
        env = _sync_env(sim.base_url, tmp_path, "run", {"LESSONSYNC_TABLE_FORMAT": "none"})
        run = run_sync_child(["key:lms/*"], env, str(tmp_path / "run.urls"))
    assert "error" not in run, run["error"]
    assert (Path(env["DAGSTER_HOME"]) / "dagster.yaml").is_file(), "not LessonSync's instance config"
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    with DagsterInstance.get() as instance:
        stored = [instance.get_run_by_id(run_id) for run_id in run["run_ids"]]
        assert [r.status if r else None for r in stored] == [DagsterRunStatus.SUCCESS] * len(run["run_ids"])
        assert instance.get_records_for_run(run["run_ids"][0]).records, "no event of the run in the storage"
