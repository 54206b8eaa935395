"""Operating the sync for real: a run killed mid-sync, a locked warehouse, asset checks that catch planted
bad data, and rebuilding the warehouse from the lake."""

import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import local_stack


def _cli(*args: str, env: dict[str, str], **popen: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


@pytest.mark.slow
def test_a_sync_killed_mid_run_then_rerun_equals_platform_without_duplicates(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        stack.sim.set_faults("latency_ms=40")  # slow enough to be killed in the middle
        env = {**stack.env, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
        sync = _cli("sync", "--select", RAW[0], env=env)
        manifests = stack.data_dir / "lake" / "_loads"
        deadline = time.monotonic() + 120
        while len(list(manifests.glob("*.json"))) < 2 and sync.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sync.poll() is None, "the sync finished before it could be killed: " + sync.stdout.read()[-2000:]
        sync.send_signal(signal.SIGKILL)
        sync.wait(timeout=30)
        committed_before_kill = len(list(manifests.glob("*.json")))
        assert committed_before_kill < 8  # killed with streams still to load

        stack.sim.set_faults("")
        rerun = stack.sync(select=RAW)
        assert rerun.success, rerun.error
        assert not rerun.failed_checks  # keys unique, no orphans
        assert_warehouse_equals_platform(stack)


@pytest.mark.slow
def test_a_locked_warehouse_fails_the_run_with_a_clear_message_and_no_damage(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=("group:progress",)).success
        stack.env["LESSONSYNC_DUCKDB_LOCK_TIMEOUT"] = "5"  # the default waits 10 minutes for the holder
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(60)"
                ),
                str(stack.warehouse_path),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            blocked = stack.sync(select=("group:progress",))
        finally:
            holder.kill()
            holder.wait()
        assert not blocked.success
        assert "is locked by another process" in blocked.error and str(stack.warehouse_path) in blocked.error
        assert stack.sync(select=("group:progress",)).success
        assert_warehouse_equals_platform_progress(stack)


def assert_warehouse_equals_platform_progress(stack) -> None:
    from pipeline.verify import compare_warehouse

    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim, ["active_lessons", "answers", "answer_results"])
    assert all(d.equal for d in diffs), [d.summary() for d in diffs]


@pytest.mark.slow
def test_asset_checks_pass_on_good_data_and_fail_on_planted_bad_data(synced_tiny, tmp_path):
    copy = tmp_path / "data"
    copy.mkdir()
    (copy / "warehouse.duckdb").write_bytes(synced_tiny.warehouse_path.read_bytes())
    stack = type(synced_tiny)(
        synced_tiny.sim, synced_tiny.receiver, copy, {**synced_tiny.env, "LESSONSYNC_DATA_DIR": str(copy)}
    )
    good = stack.run_job("check_warehouse")
    assert good.success, good.error
    assert [c for c in good.failed_checks if c.startswith("lms/")] == []

    with duckdb.connect(str(copy / "warehouse.duckdb")) as conn:
        conn.execute(
            "DELETE FROM lms.active_lessons WHERE (user_id, lesson_id) IN "
            "(SELECT user_id, lesson_id FROM lms.answers LIMIT 1)"
        )
        conn.execute(
            "DELETE FROM lms.lesson_sessions WHERE id IN "
            "(SELECT session_id FROM lms.lesson_session_registrations LIMIT 1)"
        )
        last_groups_load = conn.execute("SELECT max(load_seq) FROM lms._load_runs WHERE stream = 'groups'").fetchone()[
            0
        ]
        conn.execute(
            'UPDATE lms._load_runs SET tables = json_merge_patch(tables, \'{"groups": {"deleted": 15}}\') '
            "WHERE load_seq = ?",
            [last_groups_load],
        )
        # no index refuses a duplicate key (docs/warehouse.md): the key check must find it
        conn.execute("INSERT INTO lms.answer_results SELECT * FROM lms.answer_results LIMIT 1")
    bad = stack.run_job("check_warehouse")
    assert "lms/answer_results:key_unique_not_null" in bad.failed_checks
    assert "lms/answers:key_unique_not_null" not in bad.failed_checks
    assert "lms/answers:links_to_active_lessons" in bad.failed_checks
    assert "lms/lesson_session_registrations:links_to_lesson_sessions" in bad.failed_checks
    assert "lms/groups:not_shrinking" in bad.failed_checks
    assert "lms/users:links_to_active_lessons" not in bad.failed_checks


@pytest.mark.slow
def test_rebuild_from_the_lake_alone_equals_the_platform(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)
        assert stack.sync(select=RAW).success
        rebuilt = tmp_path / "rebuilt.duckdb"
        rebuild = _cli("rebuild", "--data-dir", str(stack.data_dir), "--into", str(rebuilt), env=stack.env)
        output, _ = rebuild.communicate(timeout=300)
        assert rebuild.returncode == 0, output
        original, stack.data_dir = stack.data_dir, tmp_path / "rebuilt-view"
        stack.data_dir.mkdir()
        (stack.data_dir / "warehouse.duckdb").symlink_to(rebuilt)
        assert_warehouse_equals_platform(stack)
        stack.data_dir = original
