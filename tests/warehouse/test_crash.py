"""Crash safety for real: a subprocess commits a load and is SIGKILLed at named points of the commit and
at arbitrary moments during it. The warehouse is then entirely old or entirely new (rows and cursor
together); recovery, a re-run of the load and a rebuild from the lake all end in the same state."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from warehouse_helpers import (
    ALL_SPECS,
    ANSWER_RESULTS,
    ANSWERS,
    T0,
    answers_generation,
    digest,
    digest_all,
    make_warehouse,
)

from pipeline.warehouse import Warehouse, duplicate_keys
from pipeline.warehouse.lake.lake import list_manifests
from pipeline.warehouse.upkeep.rebuild import rebuild_into

ROWS = 5_000
WORKER = Path(__file__).with_name("crash_worker.py")
pytestmark = pytest.mark.slow


def fingerprint(path: Path) -> dict[str, Any]:
    """What must be all-old or all-new: data columns with the deleted flag, and the stream's cursor.
    Read with plain DuckDB, not through Warehouse, so nothing is recovered on the way."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        data = ", ".join(f'"{name}"' for name in ANSWERS.schema.names)
        children = ", ".join(f'"{name}"' for name in ANSWER_RESULTS.schema.names)
        return {
            "answers": digest(conn, "lms.answers", data),
            "answer_results": digest(conn, "lms.answer_results", f"{children}, deleted_at IS NULL"),
            "cursor": conn.execute("SELECT cursor FROM lms._sync_state WHERE stream = 'answers'").fetchall(),
            "loads": conn.execute("SELECT count(*) FROM lms._load_runs").fetchone()[0],
        }
    finally:
        conn.close()


def commit_generation(wh: Warehouse, generation: int, cursor_hours: int) -> None:
    answers, results = answers_generation(generation, ROWS)
    with wh.load("answers", f"gen-{generation}", T0) as load:
        load.write(ANSWERS, answers)
        load.write(ANSWER_RESULTS, results)
        load.commit(cursor=T0 + timedelta(hours=cursor_hours))


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A base warehouse with generation 1 ("old"), and the state generation 2 must produce ("new")."""
    base = tmp_path_factory.mktemp("base")
    wh = make_warehouse(base)
    wh.ensure_tables(ALL_SPECS)
    commit_generation(wh, 1, 1)
    reference = tmp_path_factory.mktemp("reference")
    shutil.copytree(base, reference, dirs_exist_ok=True)
    commit_generation(make_warehouse(reference), 2, 2)
    return {"base": base, "old": fingerprint(wh.path), "new": fingerprint(reference / "warehouse.duckdb")}


def worker_env() -> dict[str, str]:
    """The worker is a fresh interpreter: let it cache bytecode (outside the tree) so it starts fast."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "lessonsync-test-pycache")
    return env


def run_worker(root: Path, point: str, kill_after: float | None = None) -> int:
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(root), point, str(ROWS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=worker_env(),
        cwd=WORKER.parent,
    )
    assert worker.stdout is not None
    line = worker.stdout.readline().strip()
    assert line == "committing", worker.communicate(timeout=60)[1]
    if kill_after is not None:
        time.sleep(kill_after)
        worker.send_signal(signal.SIGKILL)
    worker.communicate(timeout=120)
    return worker.returncode


def check_recovery(root: Path, states: dict[str, Any], expect_replayed: int | None) -> None:
    wh = make_warehouse(root)
    replayed = wh.recover()
    if expect_replayed is not None:
        assert replayed == expect_replayed
    manifests = list_manifests(wh.lake_dir)
    after_recovery = fingerprint(wh.path)
    assert after_recovery == (states["new"] if len(manifests) == 2 else states["old"])
    assert after_recovery["loads"] == len(manifests)  # the warehouse holds exactly the lake's committed loads
    if len(manifests) == 1:  # the interrupted load never committed: run it again
        commit_generation(wh, 2, 2)
    assert fingerprint(wh.path) == states["new"]
    with wh.connect(read_only=True) as conn:
        assert duplicate_keys(conn, "answers") == 0
        assert duplicate_keys(conn, "answer_results") == 0
    rebuilt = root / "rebuilt.duckdb"
    rebuild_into(wh.lake_dir, rebuilt, wh.connection_settings)
    assert digest_all(rebuilt) == digest_all(wh.path)


@pytest.mark.parametrize(
    ("point", "raw_state", "replayed"),
    [
        ("parts_written", "old", 0),  # parts in the lake, DuckDB commit not started
        ("applied", "old", 0),  # every upsert done inside the open transaction, no manifest yet
        ("manifest_written", "old", 1),  # committed in the lake, DuckDB COMMIT not reached: rolled forward
        ("committed", "new", 0),  # both committed
    ],
)
def test_sigkill_at_each_commit_step(
    tmp_path: Path, states: dict[str, Any], point: str, raw_state: str, replayed: int
) -> None:
    root = tmp_path / "wh"
    shutil.copytree(states["base"], root)
    assert run_worker(root, point) == -signal.SIGKILL
    assert fingerprint(root / "warehouse.duckdb") == states[raw_state]
    check_recovery(root, states, replayed)


@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_sigkill_at_an_arbitrary_moment_of_the_commit(tmp_path: Path, states: dict[str, Any], delay: float) -> None:
    root = tmp_path / "wh"
    shutil.copytree(states["base"], root)
    code = run_worker(root, "none", kill_after=delay)
    assert code in (0, -signal.SIGKILL)
    assert fingerprint(root / "warehouse.duckdb") in (states["old"], states["new"])
    check_recovery(root, states, None)
