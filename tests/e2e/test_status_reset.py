"""`lessonsync status` while a sync holds the warehouse, and `lessonsync reset` then sync then rebuild: all
agree on the cursor, and the reset window is read again."""

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import Stack, local_stack


def cli(stack: Stack, *args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *args],
        env={**os.environ, **stack.run_env(), "DAGSTER_HOME": str(stack.data_dir / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def finished(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=600)
    return process.returncode, output


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds")


def sync_state(path) -> dict[str, object]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return dict(conn.execute("SELECT stream, cursor FROM lms._sync_state").fetchall())


@pytest.mark.slow
def test_status_reads_while_a_sync_runs_and_reset_sync_rebuild_agree(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        stack.advance(hours=48)
        assert stack.sync(select=RAW).success
        cursor = sync_state(stack.warehouse_path)["active_lessons"]

        # A sync held while the status is read, however slow either command is: its first load's manifest comes
        # after two rounds of 1.5 s requests (token, then the first listing page); then every request waits
        # (below the client's 30 s timeout) until the status has answered, and clearing the faults lets them go.
        stack.sim.set_faults("latency_ms=1500")
        manifests = stack.data_dir / "lake" / "_loads"
        before = len(list(manifests.glob("*.json")))
        running = cli(stack, "sync", "--select", RAW[0])
        deadline = time.monotonic() + 120
        while len(list(manifests.glob("*.json"))) == before and running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        stack.sim.set_faults("latency_ms=25000")
        code, status = finished(cli(stack, "status"))
        still_running = running.poll() is None
        stack.sim.set_faults("")
        assert finished(running)[0] == 0
        assert still_running, "the sync ended before the status could be read during it"
        assert code == 0, status
        synced = sync_state(stack.warehouse_path)["active_lessons"]
        line = next(line for line in status.splitlines() if line.startswith("active_lessons"))
        assert any(iso(c) in line for c in (cursor, synced)), (cursor, synced, line)  # before or after its load
        assert "fresh" in line and "groups" in status and "quarantined" in status

        code, output = finished(
            cli(stack, "reset", "active_lessons", "--to", (synced + timedelta(hours=1)).isoformat())
        )
        assert code == 1 and "forward" in output
        back_to = synced - timedelta(days=1)
        code, output = finished(cli(stack, "reset", "active_lessons", "--to", back_to.isoformat()))
        assert code == 0 and "moved back" in output, output
        assert sync_state(stack.warehouse_path)["active_lessons"] == back_to
        code, status = finished(cli(stack, "status"))
        assert "cursor reset at" in status and iso(back_to) in status, status

        again = stack.sync(select=("key:lms/active_lessons",))
        assert again.success, again.error
        metadata = again.materializations["lms/active_lessons"]
        assert metadata["cursor_before"] == str(back_to) and metadata["rows_fetched"] > 0
        assert_warehouse_equals_platform(stack)

        code, output = finished(cli(stack, "rebuild", "--into", str(tmp_path / "rebuilt.duckdb")))
        assert code == 0, output
        assert sync_state(tmp_path / "rebuilt.duckdb") == sync_state(stack.warehouse_path)
