"""Failure alerts: the run_failure_sensor POSTs run, step and error of a real failed run to a local receiver,
without secrets; unset URL means no alert; a refusing receiver fails the tick without naming the URL."""

import pytest
from alert_receiver import alert_receiver, evaluate_failure_sensor
from dagster import DagsterInstance, SkipReason
from stack_helpers import RAW

from pipeline.defs.operations.alerts import AlertDeliveryError
from pipeline.settings import DEFAULT_APP_SECRET
from pipeline.stack import Stack, local_stack


def failed_sync(stack: Stack, instance: DagsterInstance) -> str:
    """A sync that fails fast: the platform is down and the retry budget is one second."""
    stack.sim.set_faults("outage_s=3600")
    report = stack.sync(select=RAW, instance=instance)
    assert not report.success
    return report.run_id


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory):
    with local_stack(tmp_path_factory.mktemp("alerts") / "data", scale="tiny") as stack:
        stack.env.update({"LESSONSYNC_RETRY_BUDGET": "1", "LESSONSYNC_RETRY_MAX_WAIT": "0.2"})
        instance = DagsterInstance.ephemeral()
        yield instance, failed_sync(stack, instance)


def test_a_failed_run_is_posted_to_the_alert_webhook_with_run_step_and_error(failed_run):
    instance, run_id = failed_run
    with alert_receiver() as receiver:
        assert evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url}) is None
    assert len(receiver.bodies) == 1
    alert = receiver.bodies[0]
    assert alert["run_id"] == run_id and alert["job"] == "nightly_sync" and alert["status"] == "FAILURE"
    assert alert["step"] in alert["failed_steps"] and alert["step"]
    assert "last status 503" in alert["error"] and "/v1/" in alert["error"]
    for secret in (DEFAULT_APP_SECRET, "secret-token-in-path"):
        assert secret.encode() not in receiver.raw[0]


def test_no_url_no_alert_and_a_refusing_receiver_fails_the_tick_without_naming_it(failed_run):
    instance, run_id = failed_run
    skipped = evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": ""})
    assert isinstance(skipped, SkipReason)
    with alert_receiver(status=500) as receiver, pytest.raises(AlertDeliveryError, match="answered 500") as refused:
        evaluate_failure_sensor(instance, run_id, {"LESSONSYNC_ALERT_WEBHOOK_URL": receiver.url})
    assert "secret-token-in-path" not in str(refused.value) and receiver.bodies
