"""`lessonsync status` tells the truth: after a successful sync every stream shows its run succeeded and exits 0;
after a failed run the stream shows `failed`, when, and the error's first line, and the command exits 1 (text and
--json); a stream older than the freshness policy is STALE and exits 1 too. A platform that has sent no webhook
yet is OK; run outcomes that cannot be read (wrong DAGSTER_HOME, garbage dagster.yaml, corrupt runs.db) exit 3,
UNKNOWN, in one line or one JSON document; a retry that was interrupted shows the failure of the run it retried.
Runs are recorded in a real Dagster instance (the shipped dagster.yaml), read by the CLI in its own process as
cron would run it."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterEventType, DagsterInstance
from stack_helpers import RAW

from pipeline.instance import SHIPPED_CONFIG
from pipeline.settings import DEFAULT_APP_SECRET
from pipeline.stack import Stack, local_stack
from pipeline.verify import EXPECTED, compare_warehouse
from simulator import SimulatorConfig, start_simulator

CATEGORIES = ("key:lms/categories",)
FAILS_FAST = {"LESSONSYNC_RETRY_BUDGET": "1", "LESSONSYNC_RETRY_MAX_WAIT": "0.2"}
WORKER = Path(__file__).with_name("retry_worker.py")


def names_unavailable_platform(text: str) -> bool:
    """The root cause of a run against a platform that is down: PlatformUnavailableError, or its subclass for a
    token exchange that failed for the whole retry budget (PlatformUnreachableError)."""
    return any(name in text for name in ("PlatformUnavailableError", "PlatformUnreachableError"))


def run_status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "status", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def stack_env(stack: Stack, **env: str) -> dict[str, str]:
    return {**stack.run_env(), "DAGSTER_HOME": str(stack.data_dir / "home"), **env}


def status(stack: Stack, *args: str, **env: str) -> tuple[int, str]:
    result = run_status(stack_env(stack, **env), *args)
    return result.returncode, result.stdout + result.stderr


def status_json(env: dict[str, str]) -> tuple[int, dict[str, object], str]:
    """`status --json`: its exit code, the one JSON document its stdout must be, and its stderr."""
    result = run_status(env, "--json")
    return result.returncode, json.loads(result.stdout), result.stderr


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


@pytest.mark.slow
def test_a_correct_sync_of_a_platform_that_sent_no_webhook_yet_is_ok(tmp_path):
    # No webhook URL: the platform delivers nothing, no receiver runs, no inbox exists.
    with start_simulator(SimulatorConfig(seed=42, scale="tiny", app_secret=DEFAULT_APP_SECRET)) as sim:
        env = {
            "LESSONSYNC_BASE_URL": sim.base_url,
            "LESSONSYNC_APP_SECRET": DEFAULT_APP_SECRET,
            "LESSONSYNC_DATA_DIR": str(tmp_path / "data"),
            "DAGSTER_HOME": str(tmp_path / "home"),
        }
        sync = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sync", "--select", RAW[0]],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert sync.returncode == 0, sync.stdout + sync.stderr
        with duckdb.connect(str(tmp_path / "data" / "warehouse.duckdb"), read_only=True) as conn:
            diffs = compare_warehouse(conn, sim, [t for t in EXPECTED if t != "certificates"])
            assert conn.execute("SELECT count(*) FROM lms.certificates").fetchone() == (0,)
        assert all(d.equal for d in diffs), [d.summary() for d in diffs if not d.equal]

        result = run_status(env)
        assert result.returncode == 0, result.stdout + result.stderr
        certificates = line_of(result.stdout, "certificates")
        assert "succeeded" in certificates and "no deliveries yet" in certificates, result.stdout
        assert result.stdout.rstrip().endswith("\nOK"), result.stdout

        code, report, _ = status_json(env)
        streams = {s["stream"]: s for s in report["streams"]}
        assert code == 0 and report["status"] == "OK" and report["exit_code"] == 0 and report["error"] is None
        assert set(streams) == {
            "active_lessons",
            "answers",
            "categories",
            "certificates",
            "groups",
            "lesson_sessions",
            "lessons",
        }
        assert streams["certificates"]["status"] == "OK" and streams["certificates"]["freshness"] == "no deliveries yet"
        assert report["inbox"]["inbox_id"] is None and report["inbox"]["depth"] == 0


@pytest.fixture(scope="module")
def failed_categories(tmp_path_factory):
    """A tiny stack whose categories loaded once, then failed in a second run (the platform down, kept down), both
    recorded in a real Dagster home (the shipped dagster.yaml)."""
    with local_stack(tmp_path_factory.mktemp("failed_categories") / "data", scale="tiny") as stack:
        home = stack.data_dir / "home"
        home.mkdir(parents=True)
        (home / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
        with DagsterInstance.from_config(str(home)) as instance:
            assert stack.sync(select=CATEGORIES, instance=instance).success
            stack.env.update(FAILS_FAST)
            stack.sim.set_faults("outage_s=3600")
            failed = stack.sync(select=CATEGORIES, instance=instance)
        assert not failed.success and names_unavailable_platform(failed.error or ""), failed.error
        yield stack, failed.run_id


@pytest.mark.slow
def test_run_outcomes_that_cannot_be_read_are_unknown_exit_3_in_one_line_or_one_json(failed_categories, tmp_path):
    stack, _ = failed_categories
    home = stack.data_dir / "home"
    mistyped = str(home) + "_typo"
    result = run_status(stack_env(stack, DAGSTER_HOME=mistyped))
    assert result.returncode == 3, result.stdout + result.stderr
    verdict = result.stdout.rstrip().splitlines()[-1]
    assert verdict.startswith("UNKNOWN: run outcomes unknown") and mistyped in verdict, result.stdout
    assert line_of(result.stdout, "categories").split()[1] == "unknown" and "Traceback" not in result.stderr
    code, report, _ = status_json(stack_env(stack, DAGSTER_HOME=mistyped))
    assert code == 3 and report["status"] == "UNKNOWN" and report["exit_code"] == 3 and report["ok"] is False
    assert "run outcomes unknown" in report["error"]

    garbage = tmp_path / "garbage_home"
    shutil.copytree(home, garbage)
    (garbage / "dagster.yaml").write_text("storage: [this is not\n  a dagster config\n")
    corrupt = tmp_path / "corrupt_home"
    shutil.copytree(home, corrupt)
    (corrupt / "history" / "runs.db").write_bytes(b"not a SQLite database" * 500)
    for broken in (garbage, corrupt):
        code, report, stderr = status_json(stack_env(stack, DAGSTER_HOME=str(broken)))
        assert code == 3 and report["status"] == "UNKNOWN", report
        assert str(broken) in report["error"] and "\n" not in report["error"], report["error"]
        assert "Traceback" not in stderr, stderr
        streams = {s["stream"]: s for s in report["streams"]}
        assert streams["categories"]["status"] == "UNKNOWN" and streams["categories"]["last_run"] is None
        assert streams["categories"]["last_load_at"] is not None  # what the lake says is still shown


@pytest.mark.slow
def test_an_interrupted_retry_shows_the_failure_of_the_run_it_retried(failed_categories):
    stack, parent = failed_categories
    home = stack.data_dir / "home"
    # The retry re-executes the failed step with a long retry budget: still retrying when it is interrupted.
    retry_env = stack_env(stack, LESSONSYNC_RETRY_BUDGET="120", LESSONSYNC_RETRY_MAX_WAIT="2")
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), parent],
        env={**os.environ, **retry_env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        child = wait_until_retrying(home, parent)
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=120)
    finally:
        worker.kill()
    with DagsterInstance.from_config(str(home)) as instance:
        assert "DagsterExecutionInterruptedError" in failure_classes(instance, child)

    code, output = status(stack)
    assert code == 1, output
    categories = output.splitlines().index(line_of(output, "categories"))
    failure = output.splitlines()[categories + 1].strip()
    assert failure.startswith(f"run {child} failed (lms/categories): interrupted retry of run {parent}"), output
    assert names_unavailable_platform(failure) and "Interrupted" not in output, output

    code, report, _ = status_json(stack_env(stack))
    last_run = {s["stream"]: s for s in report["streams"]}["categories"]["last_run"]
    assert code == 1 and last_run["run_id"] == child and last_run["error_run_id"] == parent
    assert names_unavailable_platform(last_run["error"])


def wait_until_retrying(home: Path, parent: str, timeout: float = 120) -> str:
    """The id of the run re-executing `parent`, once its step is in the platform client's retry loop."""
    deadline = time.monotonic() + timeout
    with DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            for run in instance.get_runs():
                if run.parent_run_id == parent and any(
                    "retrying POST /v1/token" in entry.user_message for entry in instance.all_logs(run.run_id)
                ):
                    return run.run_id
            time.sleep(0.2)
    raise AssertionError(f"no retry of run {parent} reached its retry loop within {timeout} s")


def failure_classes(instance: DagsterInstance, run_id: str) -> set[str]:
    """The root exception classes of the run's step and run failures."""
    classes = set()
    for entry in instance.all_logs(run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE}):
        error = getattr(entry.dagster_event.event_specific_data, "error", None)
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            classes.add(error.cls_name)
    return classes
