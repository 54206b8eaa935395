"""A sync SIGKILLed while it writes the S3 lake: no manifest ever names a missing part, the warehouse
catches up with a manifest that outlived its DuckDB commit, and the next run is exact."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest
from lake_parts import named_parts, stored_parts
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import Stack
from pipeline.warehouse.lake.lake import list_manifests
from pipeline.warehouse.lake.lakestore import ObjectLake

WORKER = Path(__file__).with_name("kill_worker.py")


pytestmark = pytest.mark.slow


def test_a_sync_killed_while_writing_the_s3_lake_reruns_exact(s3_stack: Stack, tmp_path: Path):
    lake = ObjectLake(s3_stack.env["LESSONSYNC_LAKE_URL"])
    # 1. killed right after the 2nd manifest is stored, before DuckDB commits it: the lake is ahead
    _killed_worker(s3_stack, "manifest_written", 2, tmp_path)
    assert [seq for seq, _ in list_manifests(lake)] == [1, 2]
    assert _committed_loads(s3_stack) == 1
    _assert_no_manifest_names_a_missing_part(lake)
    # 2. the next run rolls load 2 forward from the bucket, then is killed with a load's parts half stored
    _killed_worker(s3_stack, "part_stored", 2, tmp_path)
    manifests = list_manifests(lake)
    assert _committed_loads(s3_stack) == len(manifests) >= 2
    _assert_no_manifest_names_a_missing_part(lake)
    assert stored_parts(lake) - named_parts(lake), "the kill left no uncommitted part: it came too late"
    # 3. a clean run is exact
    rerun = s3_stack.sync(select=RAW)
    assert rerun.success, rerun.error
    assert not rerun.failed_checks
    assert_warehouse_equals_platform(s3_stack)
    _assert_no_manifest_names_a_missing_part(lake)


def _killed_worker(stack: Stack, point: str, count: int, tmp_path: Path) -> None:
    cache = str(Path(tempfile.gettempdir()) / "lessonsync-test-pycache")  # a fresh interpreter starts faster
    # the worker's spooled parts, which its kill leaves behind, in the test's directory rather than the machine's /tmp
    # (the next process with an S3 lake sweeps a dead writer's spools; this test's own process has swept already)
    spools = tmp_path / "worker-tmp"
    spools.mkdir(exist_ok=True)
    env = {**os.environ, **stack.run_env(), "PYTHONPYCACHEPREFIX": cache, "TMPDIR": str(spools)}
    worker = subprocess.run(
        [sys.executable, str(WORKER), point, str(count)],
        env=env,
        cwd=WORKER.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert worker.returncode == -9, f"not killed at {point} #{count}: {worker.stdout[-1500:]}{worker.stderr[-3000:]}"


def _committed_loads(stack: Stack) -> int:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM lms._load_runs").fetchone()[0]


def _assert_no_manifest_names_a_missing_part(lake: ObjectLake) -> None:
    missing = named_parts(lake) - stored_parts(lake)
    assert not missing, f"manifests name parts that are not stored: {sorted(missing)[:5]}"
