"""`lessonsync sync` for real when the token every stream waits on cannot be had: nothing listening at
LESSONSYNC_BASE_URL, or a token endpoint that drips its body a byte a second. The whole sync (five streams and the
answers) fails once, within the retry budget + 10 % of its raw step's start (read from the Dagster run's events,
so the process's own start is not counted), on one line naming the request and the platform's address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_upstream import hostile_upstream
from stack_helpers import failed_run_logs

LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))
BUDGET = 5.0  # LESSONSYNC_RETRY_BUDGET, seconds
SECRET = "s3cret-app-secret"


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(base_url: str, data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_") and k != "DAGSTER_HOME"}
    env.update(
        {
            "LESSONSYNC_BASE_URL": base_url,
            "LESSONSYNC_APP_SECRET": SECRET,
            "LESSONSYNC_DATA_DIR": str(data_dir),
            "LESSONSYNC_RETRY_BUDGET": str(BUDGET),
            "LESSONSYNC_RETRY_MAX_WAIT": "1",
            "LESSONSYNC_TABLE_FORMAT": "none",
        }
    )
    return env


def _failed_sync(base_url: str, data_dir: Path) -> tuple[str, float]:
    """Run `lessonsync sync`; its last line, and the seconds from the raw step's first fetch to the step's failure."""
    done = subprocess.run(
        [LESSONSYNC, "sync"], env=_env(base_url, data_dir), capture_output=True, text=True, timeout=300
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert SECRET not in output and "hunter2" not in output
    last = done.stdout.strip().splitlines()[-1]
    logs, failed_at = failed_run_logs(data_dir, last)
    started = next(e.timestamp for e in logs if "active_lessons: reading" in (e.user_message or ""))
    return last, failed_at - started


@pytest.mark.slow
def test_with_nothing_listening_the_sync_fails_once_within_the_budget(tmp_path: Path) -> None:
    port = _closed_port()
    last, took = _failed_sync(f"http://operator:hunter2@127.0.0.1:{port}", tmp_path / "data")
    print(f"nothing listening: the raw step failed {took:.1f} s after its first fetch (budget {BUDGET:.0f} s)")
    assert last.startswith("sync FAILED: ") and last.count("\n") == 0
    assert f"platform unreachable: POST /v1/token at http://127.0.0.1:{port} failed for " in last, last
    assert "(connection refused); check LESSONSYNC_BASE_URL" in last, last
    assert took <= BUDGET * 1.1, f"failed {took:.1f} s after the fetches started, retry budget {BUDGET:.0f} s"


@pytest.mark.slow
def test_a_token_endpoint_that_drips_fails_the_sync_once_within_the_budget(tmp_path: Path) -> None:
    with hostile_upstream(f"http://127.0.0.1:{_closed_port()}") as server:
        server.faults["/v1/token"] = "drip"  # headers, then a byte a second: every read is quick, the body never ends
        last, took = _failed_sync(server.base_url, tmp_path / "data")
    print(f"token drip: the raw step failed {took:.1f} s after its first fetch (budget {BUDGET:.0f} s)")
    assert last.startswith("sync FAILED: "), last
    assert f"POST /v1/token at {server.base_url} failed for " in last, last
    assert "no complete response within the request's deadline" in last, last
    assert server.hits["/v1/token"] == 1, "one exchange for every stream, its one try given the whole budget"
    assert took <= BUDGET * 1.1, f"failed {took:.1f} s after the fetches started, retry budget {BUDGET:.0f} s"
