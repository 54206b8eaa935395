"""Receiver authentication over real HTTP: every scheme accepted and rejected, rotation, open mode,
refusal to start without credentials, and no credential in logs, errors or reprs."""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from webhook_helpers import (
    API_KEY,
    BASIC_PASSWORD,
    BASIC_USER,
    BEARER,
    BEARER_NEXT,
    REPO,
    SECRETS,
    RunningReceiver,
    certificate,
    make_settings,
    serve_in_thread,
)

from pipeline.webhooks.app import create_app
from pipeline.webhooks.auth import Authenticator
from pipeline.webhooks.settings import WebhookConfigError, WebhookSettings


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ACCEPTED = {
    "bearer": {"Authorization": f"Bearer {BEARER}"},
    "bearer, rotated-in token": {"Authorization": f"Bearer {BEARER_NEXT}"},
    "bearer, lower-case scheme": {"Authorization": f"bearer {BEARER}"},
    "basic": basic(BASIC_USER, BASIC_PASSWORD),
    "api key": {"X-Api-Key": API_KEY},
}
REJECTED = {
    "no credential": {},
    "wrong bearer": {"Authorization": "Bearer not-the-token"},
    "bearer prefix of the token": {"Authorization": f"Bearer {BEARER[:-1]}"},
    "bearer value sent as basic": {"Authorization": f"Basic {BEARER}"},
    "basic with wrong password": basic(BASIC_USER, "wrong"),
    "basic with wrong user": basic("someone", BASIC_PASSWORD),
    "basic not base64": {"Authorization": "Basic %%%"},
    "api key wrong": {"X-Api-Key": "nope"},
    "api key in another header": {"X-Other-Key": API_KEY},
    "api key sent as bearer": {"Authorization": f"Bearer {API_KEY}"},
}


@pytest.mark.parametrize("headers", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_each_scheme_is_accepted(receiver: RunningReceiver, headers: dict[str, str]) -> None:
    response = receiver.post(certificate("c-auth"), headers=headers)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("headers", REJECTED.values(), ids=REJECTED.keys())
def test_bad_credentials_get_401_json_and_store_nothing(receiver: RunningReceiver, headers: dict[str, str]) -> None:
    response = receiver.post(certificate("c-auth"), headers=headers)
    assert response.status_code == 401
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == "unauthorized"
    assert all(secret not in response.text for secret in SECRETS)
    assert receiver.inbox.count_events() == 0 and receiver.inbox.count_quarantined() == 0


def test_api_key_header_name_is_configurable(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, bearer_tokens="", basic_credentials="", api_key_header="X-Platform-Key")
    with serve_in_thread(settings) as running:
        assert running.post(certificate("c1"), headers={"X-Platform-Key": API_KEY}).status_code == 200
        assert running.post(certificate("c1"), headers={"X-Api-Key": API_KEY}).status_code == 401


def test_refuses_to_start_without_credentials_unless_open(tmp_path: Path) -> None:
    with pytest.raises(WebhookConfigError, match="LESSONSYNC_WEBHOOK_BEARER_TOKENS"):
        create_app(WebhookSettings(inbox_path=tmp_path / "inbox.sqlite3"))
    with serve_in_thread(WebhookSettings(inbox_path=tmp_path / "inbox.sqlite3", allow_open=True)) as running:
        assert running.post(certificate("c-open")).status_code == 200


def test_cli_exits_with_a_clear_message_without_credentials(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "LESSONSYNC_WEBHOOK_INBOX_PATH": str(tmp_path / "inbox.sqlite3")}
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "receive", "--port", "1"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no webhook credential configured" in result.stderr
    assert "LESSONSYNC_WEBHOOK_ALLOW_OPEN" in result.stderr


def test_malformed_basic_credential_is_reported_without_its_value(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, basic_credentials=f"{BASIC_USER}:{BASIC_PASSWORD},{BEARER}")
    with pytest.raises(WebhookConfigError) as raised:
        create_app(settings)
    assert "entry #2" in str(raised.value)
    assert all(secret not in str(raised.value) for secret in SECRETS)


def test_credentials_never_appear_in_logs_or_reprs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    settings = make_settings(tmp_path)
    with serve_in_thread(settings) as running:
        for headers in [*ACCEPTED.values(), *REJECTED.values()]:
            running.post(certificate("c-log"), headers=headers)
        running.post({"_id": 5}, headers=ACCEPTED["basic"])  # a 400 is logged too
    assert "webhook refused (401)" in caplog.text and "webhook rejected (400)" in caplog.text  # logging did happen
    shown = caplog.text + repr(settings) + str(settings) + repr(Authenticator.from_settings(settings))
    assert all(secret not in shown for secret in SECRETS)
    assert base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode() not in caplog.text
