"""Failure alerts: the run_failure_sensor POSTs run, step and error of a real failed run to a local receiver,
without secrets; unset URL means no alert; a refusing receiver fails the tick without naming the URL.
`lessonsync sync` (cron, no daemon) POSTs the alert of its own failed run itself, and the sensor then leaves that
run alone (one alert per failure) unless recovery marked it failed; an alert endpoint that refuses costs one
WARNING line, never the sync's exit code."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from alert_receiver import alert_receiver, evaluate_failure_sensor
from dagster import DagsterInstance, SkipReason
from stack_helpers import RAW

from pipeline.defs.operations.alerts import AlertDeliveryError
from pipeline.defs.operations.runs.recovery import fail_run
from pipeline.defs.selection import widen_to_whole_multi_assets
from pipeline.settings import DEFAULT_APP_SECRET, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.sync import definitions_for

SECRETS = (DEFAULT_APP_SECRET, "secret-token-in-path")  # the app secret, and the token in the alert URL's path


def failed_run_of_a_run_worker(stack: Stack, instance: DagsterInstance) -> str:
    """A run as the daemon's run worker executes it (no in-process tag) that fails fast: the platform is down
    and the retry budget is one second."""
    stack.sim.set_faults("outage_s=3600")
    with environment(stack.run_env()):
        defs = definitions_for(load_settings())
        result = defs.resolve_job_def("nightly_sync").execute_in_process(
            instance=instance, asset_selection=widen_to_whole_multi_assets(defs, RAW).keys, raise_on_error=False
        )
    assert not result.success
    return result.run_id


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    with local_stack(tmp_path_factory.mktemp("alerts") / "data", scale="tiny") as stack:
        stack.env.update({"LESSONSYNC_RETRY_BUDGET": "1", "LESSONSYNC_RETRY_MAX_WAIT": "0.2"})
        instance = DagsterInstance.ephemeral()
        yield instance, failed_run_of_a_run_worker(stack, instance)


def test_a_failed_run_is_posted_to_the_alert_webhook_with_run_step_and_error(failed_run):
    instance, run_id = failed_run
    with alert_receiver() as receiver:
        assert evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url}) is None
    assert len(receiver.bodies) == 1
    alert = receiver.bodies[0]
    assert alert["run_id"] == run_id and alert["job"] == "nightly_sync" and alert["status"] == "FAILURE"
    assert alert["step"] in alert["failed_steps"] and alert["step"]
    assert "last status 503" in alert["error"] and "/v1/" in alert["error"]
    for secret in SECRETS:
        assert secret.encode() not in receiver.raw[0]


def test_no_url_no_alert_and_a_refusing_receiver_fails_the_tick_without_naming_it(failed_run):
    instance, run_id = failed_run
    skipped = evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": ""})
    assert isinstance(skipped, SkipReason)
    with alert_receiver(status=500) as receiver, pytest.raises(AlertDeliveryError, match="answered 500") as refused:
        evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url})
    assert "secret-token-in-path" not in str(refused.value) and receiver.bodies


def nothing_listening() -> str:
    """The address of a loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def failing_sync(tmp_path: Path, alert_url: str) -> tuple[int, str, str]:
    """`lessonsync sync` as cron runs it, against a platform address nobody answers: exit code, output, run id."""
    env = {
        **os.environ,
        "LESSONSYNC_BASE_URL": nothing_listening(),
        "LESSONSYNC_APP_SECRET": DEFAULT_APP_SECRET,
        "LESSONSYNC_RETRY_BUDGET": "1",
        "LESSONSYNC_RETRY_MAX_WAIT": "0.2",
        "LESSONSYNC_DATA_DIR": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "home"),
        "LESSONSYNC_ALERT_WEBHOOK_URL": alert_url,
    }
    sync = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "sync", "--select", "key:lms/categories"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    run_id = re.search(r"sync FAILED: .* \(run ([0-9a-f-]{36})\)$", sync.stdout.rstrip())
    assert run_id, sync.stdout + sync.stderr
    return sync.returncode, sync.stdout + sync.stderr, run_id.group(1)


@pytest.mark.slow
def test_a_failing_lessonsync_sync_posts_its_alert_itself_once(tmp_path):
    with alert_receiver() as receiver:
        code, output, run_id = failing_sync(tmp_path, receiver.url)
        assert code == 1 and "WARNING: failure alert" not in output, output
        assert len(receiver.bodies) == 1, output
        alert = receiver.bodies[0]
        assert alert["run_id"] == run_id and alert["job"] == "nightly_sync" and alert["status"] == "FAILURE"
        assert alert["step"] == "lms_raw" and "/v1/token" in alert["error"], alert
        for secret in SECRETS:
            assert secret.encode() not in receiver.raw[0] and secret not in output

        # The daemon's sensor, seeing the same failed run, leaves it to the process that sent its alert...
        env = {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url}
        with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
            assert isinstance(evaluate_failure_sensor(instance, run_id, env), SkipReason)
            assert len(receiver.bodies) == 1
            # ...but alerts a run that recovery marked failed (its process died before it could)
            fail_run(instance, instance.get_run_by_id(run_id), by="lessonsync recover")
            assert evaluate_failure_sensor(instance, run_id, env) is None
        assert len(receiver.bodies) == 2 and receiver.bodies[1]["run_id"] == run_id


@pytest.mark.slow
def test_a_refusing_alert_endpoint_costs_a_warning_line_not_the_exit_code(tmp_path):
    with alert_receiver(status=500) as receiver:
        code, output, run_id = failing_sync(tmp_path, receiver.url)
    assert code == 1 and len(receiver.bodies) == 1 and receiver.bodies[0]["run_id"] == run_id
    warnings = [line for line in output.splitlines() if line.startswith("WARNING: failure alert")]
    assert warnings == [
        "WARNING: failure alert not delivered to LESSONSYNC_ALERT_WEBHOOK_URL: the alert webhook answered 500"
    ]
    assert "secret-token-in-path" not in output and "Traceback" not in output
