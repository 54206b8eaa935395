"""`lessonsync status` tells the truth: after a successful sync every stream shows its run succeeded and exits 0;
after a failed run the stream shows `failed`, when, and the error's first line, and the command exits 1 (text and
--json); a stream older than the freshness policy is STALE and exits 1 too. Runs are recorded in a real Dagster
instance (the shipped dagster.yaml), read by the CLI in its own process as cron would run it."""

import json
import os
import subprocess
import sys

import pytest
from dagster import DagsterInstance
from stack_helpers import RAW

from pipeline.instance import SHIPPED_CONFIG
from pipeline.stack import Stack, local_stack


def status(stack: Stack, *args: str, **env: str) -> tuple[int, str]:
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "status", *args],
        env={**os.environ, **stack.run_env(), "DAGSTER_HOME": str(stack.data_dir / "home"), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


def line_of(output: str, stream: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(stream + " "))


@pytest.mark.slow
def test_status_shows_a_failed_run_and_exits_non_zero(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        home = stack.data_dir / "home"
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
        stack.advance(hours=48)
        with DagsterInstance.from_config(str(home)) as instance:
            assert stack.sync(select=RAW, instance=instance).success

            code, output = status(stack)
            assert code == 0, output
            for stream in ("active_lessons", "answers", "categories", "certificates", "groups", "lessons"):
                assert "succeeded" in line_of(output, stream) and "fresh" in line_of(output, stream), output
            assert "certificate inbox" in output and "quarantined: inbox 0, dead letters 0" in output

            stack.env.update({"LESSONSYNC_RETRY_BUDGET": "1", "LESSONSYNC_RETRY_MAX_WAIT": "0.2"})
            stack.sim.set_faults("outage_s=3600")
            failed = stack.sync(select=("key:lms/categories",), instance=instance)
            stack.sim.set_faults("")
            assert not failed.success

        code, output = status(stack)
        assert code == 1, output
        assert line_of(output, "categories").split()[1] == "failed", output
        assert f"run {failed.run_id} failed (lms/categories): " in output and "503" in output, output
        assert "succeeded" in line_of(output, "lessons")  # the other streams keep their own last run
        assert output.rstrip().endswith("NOT OK: categories"), output

        code, output = status(stack, "--json")
        assert code == 1
        report = json.loads(output)
        streams = {s["stream"]: s for s in report["streams"]}
        assert report["ok"] is False and streams["categories"]["ok"] is False
        assert streams["categories"]["last_run"]["outcome"] == "failed"
        assert streams["categories"]["last_run"]["run_id"] == failed.run_id
        assert "503" in streams["categories"]["last_run"]["error"]
        assert streams["groups"]["rows"]["users"] > 0 and streams["groups"]["ok"] is True
        assert report["inbox"]["depth"] == 0 and report["inbox"]["quarantined"] == {"inbox": 0, "dead letters": 0}

        code, output = status(stack, LESSONSYNC_FRESHNESS_HOURS="0.0001")
        assert code == 1 and "STALE" in line_of(output, "lessons"), output
