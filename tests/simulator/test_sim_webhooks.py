"""Certificate webhooks delivered to a real receiver on loopback: auth schemes, retries, duplicates."""

from __future__ import annotations

import base64

import pytest
from simtools import Receiver, running_receiver

from pipeline.contract.models import Certificate
from simulator import SimulatorConfig, start_simulator
from simulator.webhooks import auth_headers


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        ("bearer:s3cret-token", "authorization", "Bearer s3cret-token"),
        ("basic:ada:pa:ss", "authorization", "Basic " + base64.b64encode(b"ada:pa:ss").decode()),
        ("header:X-Api-Key:k-123", "x-api-key", "k-123"),
    ],
)
def test_deliveries_carry_the_configured_credential_and_source(auth: str, header: str, expected: str) -> None:
    receiver = Receiver()
    with (
        running_receiver(receiver) as url,
        start_simulator(
            SimulatorConfig(scale="tiny", webhook_url=url, webhook_auth=auth, webhook_source="acme-lms")
        ) as sim,
    ):
        assert sim.flush_webhooks(timeout=30)
        backlog = len(receiver.deliveries)
        assert backlog >= len(list(sim.ground_truth("certificates")))  # existing certificates, delivered at start
    for delivery in receiver.deliveries:
        assert delivery["headers"][header] == expected
        assert delivery["headers"]["x-webhook-source"] == "acme-lms"
        assert delivery["headers"]["content-type"] == "application/json"
        Certificate.model_validate(delivery["body"])


def test_completed_and_expired_events_as_the_clock_moves() -> None:
    receiver = Receiver()
    with (
        running_receiver(receiver) as url,
        start_simulator(SimulatorConfig(scale="tiny", webhook_url=url, webhook_auth="bearer:t")) as sim,
    ):
        assert sim.flush_webhooks(timeout=30)
        receiver.deliveries.clear()
        activity = sim.advance(hours=24)
        assert sim.flush_webhooks(timeout=30)
        now = sim.now().isoformat()
        truth = {c["_id"]: c for c in sim.ground_truth("certificates")}
        stats = sim.webhook_stats()
    events = {(d["headers"]["x-webhook-event"], d["body"]["_id"]): d["body"] for d in receiver.deliveries}
    completed = [b for (kind, _), b in events.items() if kind == "certificate_completed"]
    expired = [b for (kind, _), b in events.items() if kind == "certificate_expired"]
    assert len(completed) == activity["certificates_completed"] and len(expired) == activity["certificates_expired"]
    assert all(b["expires"] is None or b["expires"] > b["creationDate"] for b in completed)
    assert all(b["expires"] < now and b["creationDate"] < b["expires"] for b in expired)
    assert sum(b["expiryReminderSent"] for b in expired) >= len(expired) // 2
    assert all(truth[b["_id"]] == b for b in expired)  # the expired delivery is the current state
    assert stats["delivered"] >= stats["enqueued"] and stats["failed"] == 0


def test_non_2xx_answers_are_retried_until_delivered() -> None:
    receiver = Receiver(fail_first=5)
    with running_receiver(receiver) as url, start_simulator(SimulatorConfig(scale="tiny", webhook_url=url)) as sim:
        assert sim.flush_webhooks(timeout=30)
        stats = sim.webhook_stats()
        expected = {c["_id"] for c in sim.ground_truth("certificates")}
    assert {d["body"]["_id"] for d in receiver.deliveries} == expected  # at least once, for every certificate
    assert stats["retries"] == 5 and stats["by_status"]["503"] == 5 and stats["failed"] == 0


def test_duplicates_are_sent_on_purpose_and_unreachable_receivers_give_up() -> None:
    receiver = Receiver()
    with (
        running_receiver(receiver) as url,
        start_simulator(SimulatorConfig(scale="tiny", webhook_url=url, webhook_duplicate_rate=0.5)) as sim,
    ):
        sim.advance(hours=72)
        assert sim.flush_webhooks(timeout=30)
        duplicates = sim.webhook_stats()["duplicates"]
    ids = [d["body"]["_id"] + d["headers"]["x-webhook-event"] for d in receiver.deliveries]
    assert duplicates > 0 and len(ids) - len(set(ids)) == duplicates
    with start_simulator(
        SimulatorConfig(
            scale="tiny", webhook_url="http://127.0.0.1:9/closed", webhook_max_attempts=2, webhook_backoff_seconds=0.01
        )
    ) as sim:
        assert sim.flush_webhooks(timeout=30)
        stats = sim.webhook_stats()
    assert stats["failed"] == stats["enqueued"] > 0 and stats["delivered"] == 0


def test_auth_spec_errors_never_echo_the_credential() -> None:
    with pytest.raises(ValueError) as caught:
        auth_headers("token:very-secret-value")
    assert "very-secret-value" not in str(caught.value)
    with pytest.raises(ValueError, match="webhook_url"):
        SimulatorConfig(webhook_auth="bearer:x")
