"""After a crash, on ONE persistent Dagster instance (as `make dev`, cron and the README set it up): a sync
SIGKILLed at any moment leaves a STARTED run holding the `warehouse` pool; the next sync fails that run, frees
its slot and finishes exact. A live run holding the pool is never touched: the second run names it while it
waits and fails after LESSONSYNC_POOL_WAIT_TIMEOUT."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRunStatus
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.defs.operations.runs.identity import recorded_process
from pipeline.instance import SHIPPED_CONFIG
from pipeline.stack import Stack, local_stack
from pipeline.warehouse.lake.lake import list_manifests

WORKER = Path(__file__).with_name("sync_kill_worker.py")
POOL = "warehouse"
pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """A tiny platform whose pages come slowly enough to be killed in the middle, and one Dagster home."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(SHIPPED_CONFIG, home / "dagster.yaml")
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        # a regression waits 60 s and fails, instead of hanging the suite for the default half hour
        stack.env.update(DAGSTER_HOME=str(home), LESSONSYNC_POOL_WAIT_TIMEOUT="60")
        yield stack


def instance_of(stack: Stack) -> DagsterInstance:
    return DagsterInstance.from_config(stack.env["DAGSTER_HOME"])


def start_sync(stack: Stack, *args: str, kill_at: str = "none") -> subprocess.Popen:
    env = {**os.environ, **stack.run_env(), "PYTHONPATH": str(WORKER.parents[2])}
    return subprocess.Popen(
        [sys.executable, str(WORKER), kill_at, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_when(sync: subprocess.Popen, moment: Callable[[str], bool], timeout: float = 180) -> str:
    """SIGKILL `sync` at the first output line for which `moment` holds; returns its output so far."""
    assert sync.stdout is not None
    seen, deadline = [], time.monotonic() + timeout
    for line in sync.stdout:
        seen.append(line)
        if moment(line):
            sync.send_signal(signal.SIGKILL)
            break
        assert time.monotonic() < deadline, "the moment never came:\n" + "".join(seen[-20:])
    sync.wait(timeout=30)
    assert sync.returncode == -signal.SIGKILL, "the sync ended before the moment:\n" + "".join(seen[-20:])
    return "".join(seen)


def killed_run(instance: DagsterInstance, pid: int):
    """The newest run of the sync with this pid (an earlier run may have had the same pid: reused)."""
    runs = [r for r in instance.get_runs() if _pid_of(r) == pid]
    assert runs, f"the killed sync (pid {pid}) created no run"
    return runs[0]


def _pid_of(run) -> int | None:
    process = recorded_process(run.run_id, run.tags)
    return process.pid if process is not None else None


def assert_recovered(stack: Stack, pid: int, rerun_select: tuple[str, ...] = RAW) -> None:
    """The killed run is left unfinished; the next sync on the same instance fails it, frees its slot, is exact."""
    instance = instance_of(stack)
    dead = killed_run(instance, pid)
    assert dead.status in (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTED)
    rerun = stack.sync(instance=instance, select=rerun_select)
    assert rerun.success, rerun.error
    dead = instance.get_run_by_id(dead.run_id)
    assert dead.status == DagsterRunStatus.FAILURE
    failure = next(e for e in instance.all_logs(dead.run_id) if e.dagster_event and e.dagster_event.is_run_failure)
    assert f"pid {pid}" in failure.message and "is gone" in failure.message and rerun.run_id in failure.message
    assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []
    assert_warehouse_equals_platform(stack)
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        loads = conn.execute("SELECT count(*) FROM lms._load_runs").fetchone()[0]
    # docs/exactness.md, "Loads": the warehouse holds exactly the lake's committed loads; a killed load's parts are in none
    assert loads == len(list_manifests(stack.data_dir / "lake"))


@pytest.mark.timeout(900)
def test_a_sync_killed_at_any_moment_never_wedges_the_next_one(stack: Stack) -> None:
    """Four kills, each followed by the next sync, all on the one instance (and one warehouse)."""
    instance = instance_of(stack)
    # 1. while Dagster starts the run: the run exists, its steps have not started or just have
    sync = start_sync(stack, "--select", RAW[0])
    deadline = time.monotonic() + 120
    while not [r for r in instance.get_runs() if _pid_of(r) == sync.pid]:
        assert sync.poll() is None and time.monotonic() < deadline, "no run was created"
        time.sleep(0.02)
    sync.send_signal(signal.SIGKILL)
    sync.wait(timeout=30)
    assert_recovered(stack, sync.pid)

    # 2. during a fetch: the step holds the pool slot, the wedge the next sync must clear
    stack.advance(hours=24)
    stack.sim.set_faults("latency_ms=40")
    sync = start_sync(stack, "--select", "group:progress")
    kill_when(sync, lambda line: "active_lessons: reading" in line)
    stack.sim.set_faults("")
    assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots
    assert_recovered(stack, sync.pid)

    # 3. in the answers commit: active lessons load first (answers depend on them), so the 2nd commit is the
    # answers', killed with every upsert done in the open DuckDB transaction, before its manifest
    stack.advance(hours=24)
    sync = start_sync(stack, "--select", "group:progress", kill_at="applied:2")
    output, _ = sync.communicate(timeout=180)
    assert sync.returncode == -signal.SIGKILL, output[-2000:]
    run_id = killed_run(instance, sync.pid).run_id
    assert list((stack.data_dir / "lake" / "answers").glob(f"*/{run_id}-answers-*/part-*.parquet"))  # parts written
    assert_recovered(stack, sync.pid)
    assert not list((stack.data_dir / "lake" / "_loads").glob(f"*-{run_id}-answers-*.json"))  # never committed

    # 4. while the marts build
    sync = start_sync(stack)
    kill_when(sync, lambda line: " rows (table) in " in line)
    assert_recovered(stack, sync.pid, rerun_select=())  # everything, marts included


def test_a_live_run_holding_the_pool_is_named_and_waited_for_until_the_timeout(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    stack.sim.set_faults("latency_ms=5000")  # every request of the holder takes 5 s: its step holds the pool
    holder = start_sync(stack, "--select", "group:progress")
    assert holder.stdout is not None
    for line in holder.stdout:
        if "active_lessons: reading" in line:  # the holder's step has its pool slot
            break
    instance = instance_of(stack)
    holder_run = killed_run(instance, holder.pid)
    stack.env["LESSONSYNC_POOL_WAIT_TIMEOUT"] = "4"
    blocked = stack.sync(instance=instance, select=("key:lms/categories",))
    stack.sim.set_faults("")
    assert not blocked.success
    assert f"held by run {holder_run.run_id}" in blocked.error and "LESSONSYNC_POOL_WAIT_TIMEOUT" in blocked.error
    # the in-process run waits before it starts (pipeline/defs/operations/runs/pool_wait.py), reporting on its logger
    reports = [r.getMessage() for r in caplog.records if "for a slot of pool 'warehouse'" in r.getMessage()]
    assert reports and f"held by run {holder_run.run_id} step" in reports[0] and "alive" in reports[0]
    output, _ = holder.communicate(timeout=180)
    assert holder.returncode == 0, output[-2000:]  # the live run was never touched
    assert instance.get_run_by_id(holder_run.run_id).status == DagsterRunStatus.SUCCESS
    assert instance.event_log_storage.get_concurrency_info(POOL).claimed_slots == []


def test_a_sync_killed_while_other_streams_are_fetched_in_the_background_recovers_exact(stack: Stack) -> None:
    """Killed as the active lessons' load commits (its parts in the lake) while other streams are still being
    fetched into their own loads beside it (pipeline/raw/runner.py): that load is not committed, the next sync
    is exact."""
    instance = instance_of(stack)
    stack.sim.set_faults("latency_ms=40")
    sync = start_sync(stack, "--select", RAW[0], kill_at="parts_written:active_lessons:1")
    output, _ = sync.communicate(timeout=180)
    stack.sim.set_faults("")
    assert sync.returncode == -signal.SIGKILL, output[-2000:]
    assert "at once" in output and "active_lessons: reading" in output
    run_id = killed_run(instance, sync.pid).run_id
    assert_recovered(stack, sync.pid)
    # the active lessons' load of it never committed (snapshots whose fetch ended first may have committed theirs)
    assert not list((stack.data_dir / "lake" / "_loads").glob(f"*-{run_id}-active_lessons-*.json"))
