"""Assertions about a local stack, shared by the end-to-end tests (imported by name: tests/ is on sys.path)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
from dagster import DagsterInstance, EventLogEntry

from pipeline.stack import Stack
from pipeline.verify import compare_warehouse

RAW = ("key:lms/*",)  # every raw table and the certificates; analytics models have their own tests


def assert_warehouse_equals_platform(stack: Stack) -> None:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim)
    unequal = [d.summary() for d in diffs if not d.equal]
    assert not unequal, "warehouse differs from the platform:\n" + "\n".join(unequal)


ADOPTED = "adopted the fetches started"  # the raw step's line when it takes the fetches its command started


def sync_command_adopting_its_fetches(stack: Stack, dagster_home: Path, **env: str) -> str:
    """A day after a raw sync (cursors to read from: the fetches started ahead are incremental), `lessonsync sync`
    with `env` on top of the stack's; asserts that it succeeds and its raw step adopts, never discards, the fetches
    it started ahead. Returns its output."""
    assert stack.sync(select=RAW).success
    stack.advance(hours=24)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sync"],
        env={**os.environ, **stack.run_env(), "DAGSTER_HOME": str(dagster_home), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert any(ADOPTED in line for line in done.stdout.splitlines()), done.stdout[-3000:]
    assert "discarded the fetches" not in done.stdout, done.stdout[-3000:]
    return done.stdout


def failed_run_logs(data_dir: Path, last_line: str) -> tuple[list[EventLogEntry], float]:
    """The events of the run named on a failed sync's last line, and when its one failed step recorded the failure
    (wall clock): a deadline ends there, not at the process's exit, which then marks the run failed (seconds more on
    a loaded machine)."""
    run_id = re.findall(r"\(run ([0-9a-f-]+)\)", last_line)[-1]
    with DagsterInstance.from_config(str(data_dir / "dagster_home")) as instance:
        logs = instance.all_logs(run_id)
    failed = [e.timestamp for e in logs if e.dagster_event is not None and e.dagster_event.is_step_failure]
    assert len(failed) == 1, f"one step fails, once: {len(failed)} failures in run {run_id}"
    return logs, failed[0]
