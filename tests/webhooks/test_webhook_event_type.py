"""How the receiver tells a completion from an expiry (the payload does not say): `expires` against the
sender's Date header when present, else the receipt time; optionally a declared type header."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from webhook_helpers import BEARER, RunningReceiver, certificate, make_settings, serve_in_thread

from pipeline.webhooks.event_clock import sender_instant

NOW = datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def event_type(receiver: RunningReceiver, expires: datetime, **headers: str) -> str:
    response = receiver.post(
        certificate("c1", expires=iso(expires)), headers={"Authorization": f"Bearer {BEARER}", **headers}
    )
    assert response.status_code == 200, response.text
    return str(response.json()["event_type"])


CASES = {
    # (expires relative to now, Date relative to now or None) -> inferred type
    "no Date: expires passed at receipt": (timedelta(hours=-1), None, "certificate_expired"),
    "no Date: expires ahead of receipt": (timedelta(hours=1), None, "certificate_completed"),
    "sender clock behind: completion whose expiry has passed for us": (
        timedelta(days=-10),
        timedelta(days=-20),
        "certificate_completed",
    ),
    "sender clock ahead: expiry not yet reached for us": (timedelta(days=2), timedelta(days=3), "certificate_expired"),
    "expiry sent in the very second of expires": (
        timedelta(hours=5, milliseconds=700),
        timedelta(hours=5),
        "certificate_expired",
    ),
}


@pytest.mark.parametrize("expires_in, date_in, expected", CASES.values(), ids=CASES.keys())
def test_expires_is_judged_on_the_sender_clock_when_it_sends_a_date(
    receiver: RunningReceiver, expires_in: timedelta, date_in: timedelta | None, expected: str
) -> None:
    base = NOW.replace(microsecond=0)
    headers = {} if date_in is None else {"Date": http_date(base + date_in)}
    assert event_type(receiver, base + expires_in, **headers) == expected


def test_receipt_clock_setting_ignores_the_date_header(tmp_path: Path) -> None:
    with serve_in_thread(make_settings(tmp_path, expiry_clock="receipt")) as running:
        ahead = http_date(NOW + timedelta(days=3))
        assert event_type(running, NOW + timedelta(days=2), Date=ahead) == "certificate_completed"


def test_unreadable_date_falls_back_to_receipt(receiver: RunningReceiver) -> None:
    assert event_type(receiver, NOW - timedelta(hours=1), Date="yesterday-ish") == "certificate_expired"
    assert sender_instant("not a date") is None and sender_instant(None) is None


def test_a_configured_event_type_header_is_used_when_it_names_a_known_type(tmp_path: Path) -> None:
    with serve_in_thread(make_settings(tmp_path, event_type_header="X-Webhook-Event")) as running:
        future = NOW + timedelta(days=30)
        assert event_type(running, future, **{"X-Webhook-Event": "certificate_expired"}) == "certificate_expired"
        assert event_type(running, future, **{"X-Webhook-Event": "badge.revoked"}) == "certificate_completed"


def test_the_type_header_is_ignored_unless_configured(receiver: RunningReceiver) -> None:
    future = NOW + timedelta(days=30)
    assert event_type(receiver, future, **{"X-Webhook-Event": "certificate_expired"}) == "certificate_completed"
