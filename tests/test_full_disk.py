"""A full disk, for real: the data directory on a small tmpfs (mounted by this test; skipped where mounting is not
permitted). `lessonsync sync` ends on one line naming the full device, the warehouse stays readable, and once
space is back the next sync marks the dead run failed and leaves the warehouse exact."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRunStatus
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import local_stack

LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))


def _mount(where: Path, size: str, *, remount: bool = False) -> subprocess.CompletedProcess[str]:
    options = f"remount,size={size}" if remount else f"size={size}"
    command = ["mount", "-o", options, str(where)] if remount else ["mount", "-t", "tmpfs", "-o", options, "tmpfs"]
    return subprocess.run(command + ([] if remount else [str(where)]), capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: a real full filesystem cannot be made here")
    mounted = _mount(where, "96m")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here ({mounted.stderr.strip()}): needs root or CAP_SYS_ADMIN")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _sync(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    select = [option for key in RAW for option in ("--select", key)]
    return subprocess.run([LESSONSYNC, "sync", *select, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_full_disk_fails_the_sync_on_one_line_and_the_next_sync_is_exact(small_disk: Path) -> None:
    with local_stack(small_disk / "data", scale="tiny") as stack:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_") and k != "DAGSTER_HOME"}
        env.update(stack.env)
        first = _sync(env)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

        stack.advance(hours=24)
        used = shutil.disk_usage(small_disk).used
        assert _mount(small_disk, str(used + (1 << 20)), remount=True).returncode == 0  # 1 MiB left
        full = _sync(env, "--full-refresh")
        last = full.stdout.strip().splitlines()[-1]
        assert full.returncode == 1, full.stdout[-3000:] + full.stderr[-3000:]
        assert last.startswith(f"sync FAILED: no space left on device writing {small_disk}"), last
        assert "Traceback" not in full.stdout
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:  # not corrupt, still readable
            assert conn.execute("SELECT count(*) FROM lms._sync_state").fetchone()[0] > 0

        assert _mount(small_disk, "256m", remount=True).returncode == 0  # space is back
        again = _sync(env)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert_warehouse_equals_platform(stack)
        with DagsterInstance.from_config(str(stack.data_dir / "dagster_home")) as instance:
            statuses = [run.status for run in instance.get_runs()]
        assert DagsterRunStatus.STARTED not in statuses  # the run the full disk killed is marked failed
        assert statuses.count(DagsterRunStatus.SUCCESS) == 2 and DagsterRunStatus.FAILURE in statuses
