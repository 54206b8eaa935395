"""The wheel with no extra, as one machine runs LessonSync from cron: deploy/install.sh installs it alone into a new
venv; from a directory outside the checkout, `lessonsync sync` syncs a tiny simulated platform exactly and
`lessonsync status` reports every stream's run succeeded and the rows the warehouse holds. Neither the Kubernetes
client, the Dagster webserver and dg, nor pandas is installed; a setting that needs a missing extra stops the
command with one line naming `pip install 'lessonsync[extra]'` (and no password)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest
from stack_helpers import assert_warehouse_equals_platform
from wheel_helpers import install, outside_env

from pipeline.stack import local_stack

pytestmark = pytest.mark.slow

NOT_IN_THE_CORE = ("kubernetes", "dagster_k8s", "dagster_webserver", "dagster_dg_cli", "pandas")
PROBE = """
import importlib, json, sys
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        missing.append(name)
print(json.dumps(missing))
"""


def test_the_core_wheel_alone_syncs_exactly_and_reports(
    tmp_path: Path, lessonsync_wheel: Path, dev_constraints: Path
) -> None:
    venv = tmp_path / "core" / "venv"
    install(lessonsync_wheel, venv, dev_constraints, extras="")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / args[0]), *args[1:]],
            env={**outside_env(), **stack.run_env(), **env},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
        )

    with local_stack(tmp_path / "data", scale="tiny") as stack:
        probe = run("python", "-c", PROBE, *NOT_IN_THE_CORE)
        assert probe.returncode == 0, probe.stderr[-2000:]
        assert json.loads(probe.stdout) == list(NOT_IN_THE_CORE)

        stack.advance(hours=48)
        # The Iceberg mirror off, as in the rest of the suite (tests/conftest.py): test_wheel_install.py syncs with it
        # on, in an install without pandas too; this test is about what the core lacks.
        sync = run("lessonsync", "sync", LESSONSYNC_TABLE_FORMAT="none")
        assert sync.returncode == 0, (sync.stdout + sync.stderr)[-3000:]
        assert "sync succeeded" in sync.stdout
        assert_warehouse_equals_platform(stack)

        status = run("lessonsync", "status", "--json", LESSONSYNC_TABLE_FORMAT="none")
        assert status.returncode == 0, (status.stdout + status.stderr)[-3000:]
        report = json.loads(status.stdout)
        assert report["ok"] is True
        assert {s["stream"]: s["last_run"]["outcome"] for s in report["streams"] if s["last_run"]} == {
            s["stream"]: "succeeded" for s in report["streams"]
        }
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            for stream in report["streams"]:
                for table, rows in stream["rows"].items():
                    assert rows == conn.execute(f"SELECT count(*) FROM lms.{table}").fetchone()[0], (stream, table)
        assert list(cwd.iterdir()) == []

        secret_url = "postgresql://lessonsync:s3cret@127.0.0.1:9/dagster"
        for command, variable, value, extra in (
            ("sync", "LESSONSYNC_MODELS_RUNNER", "dbt", "dbt"),
            ("sync", "LESSONSYNC_LAKE_URL", "s3://lessonsync-lake/prefix", "s3"),
            ("sync", "LESSONSYNC_DAGSTER_POSTGRES_URL", secret_url, "postgres"),
            ("inbox", "LESSONSYNC_INBOX_URL", secret_url, "postgres"),
        ):
            done = run("lessonsync", command, *(["list"] if command == "inbox" else []), **{variable: value})
            assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
            assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr[-3000:]
            assert done.stderr.startswith(f"lessonsync {command}: {variable}"), done.stderr
            assert f"needs the extra {extra!r}, which is not installed" in done.stderr
            assert f"pip install 'lessonsync[{extra}]'" in done.stderr
            assert "s3cret" not in done.stderr
