"""Failure alerts: when a run of this code location fails, POST a JSON summary (run, job, failed steps, error) to
LESSONSYNC_ALERT_WEBHOOK_URL, so a failed night is noticed the same morning. Off when the URL is unset.

Two senders, one payload (`failure_alert`) and one POST (`send_alert`): the run-failure sensor (the daemon) for
runs a run worker executed, and `lessonsync sync` (pipeline/cli/sync.py) for its own in-process run, daemon or
not. The sensor skips in-process runs, so an alert is sent once, unless the run's process died and recovery
marked it failed (pipeline/defs/operations/runs/recovery.py): then only the sensor can tell.

The URL is a secret (chat webhooks carry their token in it): it is never logged, put in metadata or in the
alert. The error text is the root cause Dagster recorded, with the app secret redacted in case a message
ever quoted it.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from dagster import (
    DefaultSensorStatus,
    RunFailureSensorContext,
    SensorDefinition,
    SkipReason,
    run_failure_sensor,
)

from pipeline.defs.operations.runs.recovery import MARKED_FAILED_BY_TAG
from pipeline.defs.operations.runs.retry_policy import IN_PROCESS_TAG
from pipeline.settings import Settings

log = logging.getLogger("lessonsync.alerts")

ALERT_TIMEOUT_SECONDS = 10.0
MAX_ERROR_CHARS = 4_000  # an alert is a notice, not a log: the run page has the full trace


class AlertDeliveryError(RuntimeError):
    """The alert receiver did not accept the alert (the message never names the URL)."""


def failure_alert(
    run_id: str | None, job_name: str, step_errors: dict[str, str], run_error: str, settings: Settings
) -> dict[str, Any]:
    """The JSON body of an alert: which run, which step(s) and why, secrets redacted."""
    steps = sorted(step_errors)
    error = step_errors[steps[0]] if steps else run_error
    return {
        "source": "lessonsync",
        "status": "FAILURE",
        "run_id": run_id,
        "job": job_name,
        "step": steps[0] if steps else None,
        "failed_steps": steps,
        "error": _redacted(error, settings)[:MAX_ERROR_CHARS],
    }


def send_alert(url: str, payload: dict[str, Any]) -> None:
    """POST the alert; a refusal or a network error raises AlertDeliveryError (the sensor tick shows it)."""
    try:
        response = httpx.post(url, json=payload, timeout=ALERT_TIMEOUT_SECONDS)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise AlertDeliveryError(f"the alert webhook could not be reached ({type(exc).__name__})") from None
    if not response.is_success:
        raise AlertDeliveryError(f"the alert webhook answered {response.status_code}")


def alert_failed_sync(
    run_id: str | None, job_name: str, step_errors: dict[str, str], run_error: str, settings: Settings
) -> str | None:
    """Alert the failure of an in-process run from its own process; returns the warning line when the alert
    could not be delivered (None: delivered, or alerts off). Never raises: the run's outcome is the news."""
    url = _alert_url(settings)
    if not url:
        return None
    try:
        send_alert(url, failure_alert(run_id, job_name, step_errors, run_error, settings))
    except AlertDeliveryError as error:
        return f"WARNING: failure alert not delivered to LESSONSYNC_ALERT_WEBHOOK_URL: {error}"
    log.info("failure alert sent for run %s", run_id)
    return None


def _alert_url(settings: Settings) -> str:
    return settings.alert_webhook_url.get_secret_value() if settings.alert_webhook_url is not None else ""


def _redacted(text: str, settings: Settings) -> str:
    secret = settings.app_secret.get_secret_value()
    return text.replace(secret, "***") if secret else text


def _root_error(event: Any) -> str:
    """The message of the exception that started it all, not Dagster's 'error occurred in op' wrapper."""
    error = getattr(event.event_specific_data, "error", None)
    if error is None:
        return event.message or "the run failed"
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return str(error.message).strip()


def build_failure_alert_sensor(settings: Settings) -> SensorDefinition:
    """The sensor, alerting Settings.alert_webhook_url (held here, never in the sensor's config or metadata)."""

    @run_failure_sensor(
        name="failure_alert_sensor",
        default_status=DefaultSensorStatus.RUNNING,
        description="POSTs run, step and error of every failed run to LESSONSYNC_ALERT_WEBHOOK_URL.",
    )
    def failure_alert_sensor(context: RunFailureSensorContext) -> SkipReason | None:
        """Tells the operator about a failed run."""
        return alert_failed_run(context, settings)

    return failure_alert_sensor


def alert_failed_run(context: RunFailureSensorContext, settings: Settings) -> SkipReason | None:
    url = _alert_url(settings)
    if not url:
        return SkipReason("LESSONSYNC_ALERT_WEBHOOK_URL is not set")
    run = context.dagster_run
    if run.tags.get(IN_PROCESS_TAG) == "true" and MARKED_FAILED_BY_TAG not in run.tags:
        return SkipReason(f"run {run.run_id} ran in-process: its own process sent the alert")
    step_errors = {e.step_key or "?": _root_error(e) for e in context.get_step_failure_events()}
    payload = failure_alert(run.run_id, run.job_name, step_errors, _root_error(context.failure_event), settings)
    send_alert(url, payload)
    log.info("failure alert sent for run %s (%s)", run.run_id, payload["step"] or "no step")
    return None
