"""Receiver validation over real HTTP: 400 naming the bad field, 413 while streaming, 415, quarantine of
every rejected body, and what is recorded with an accepted one."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from webhook_helpers import BEARER, RunningReceiver, certificate, make_settings, serve_in_thread

BAD_PAYLOADS = {
    "not JSON": (b"{not json", "body", "not valid JSON"),
    "empty body": (b"", "body", "not valid JSON"),
    "JSON array": (b"[1, 2]", "body", "must be a JSON object"),
    "missing _id": (orjson.dumps({"_userId": "u1"}), "_id", "Field required"),
    "empty _id": (orjson.dumps({"_id": " "}), "_id", "non-empty"),
    "number for a string": (orjson.dumps(certificate("c1", _userId=7)), "_userId", "valid string"),
    "bad date-time": (orjson.dumps(certificate("c1", expires="next tuesday")), "expires", "datetime"),
    "nested field wrong": (
        orjson.dumps({"_id": "c1", "ruleData": {"validityDurationDays": "365"}}),
        "ruleData.validityDurationDays",
        "ruleData.validityDurationDays",
    ),
}


@pytest.mark.parametrize("body, field, words", BAD_PAYLOADS.values(), ids=BAD_PAYLOADS.keys())
def test_bad_payload_is_400_naming_the_field_and_kept_raw(
    receiver: RunningReceiver, bearer: dict[str, str], body: bytes, field: str, words: str
) -> None:
    response = receiver.post(content=body, headers=bearer)
    assert response.status_code == 400
    answer = response.json()
    assert answer["error"] == "invalid_payload" and answer["field"] == field
    assert words in answer["message"] and field in answer["message"]
    assert receiver.inbox.count_events() == 0
    [(_, _, source, status, reason, raw)] = list(receiver.inbox.read_quarantine())
    assert (source, status, raw) == ("test-platform", 400, body) and words in reason


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"])
def test_non_json_content_type_is_415_and_quarantined(
    receiver: RunningReceiver, bearer: dict[str, str], content_type: str
) -> None:
    body = orjson.dumps(certificate("c-415"))
    response = receiver.post(content=body, headers={**bearer, "Content-Type": content_type})
    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type" and content_type in response.json()["message"]
    [(_, _, _, status, reason, raw)] = list(receiver.inbox.read_quarantine())
    assert (status, raw) == (415, body) and content_type in reason


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "APPLICATION/JSON", "application/vnd.x+json"]
)
def test_json_content_types_with_parameters_or_suffix_are_accepted(
    receiver: RunningReceiver, bearer: dict[str, str], content_type: str
) -> None:
    response = receiver.post(content=orjson.dumps(certificate("c1")), headers={**bearer, "Content-Type": content_type})
    assert response.status_code == 200


def test_body_over_the_limit_is_413_by_declared_length(tmp_path: Path) -> None:
    with serve_in_thread(make_settings(tmp_path, max_body_bytes=2048)) as running:
        big = orjson.dumps(certificate("c-big", padding="x" * 4000))
        response = running.post(content=big, headers={"Authorization": f"Bearer {BEARER}"})
        assert response.status_code == 413 and response.json()["error"] == "payload_too_large"
        small = orjson.dumps(certificate("c-small"))
        assert running.post(content=small, headers={"Authorization": f"Bearer {BEARER}"}).status_code == 200
        [(_, _, _, status, reason, raw)] = list(running.inbox.read_quarantine())
        assert status == 413 and "2048" in reason and raw is None


def test_streamed_body_over_the_limit_is_answered_before_it_ends(tmp_path: Path) -> None:
    """Chunked upload without Content-Length: the 413 comes while the client has not finished sending,
    so the receiver cannot have buffered the whole body."""
    with serve_in_thread(make_settings(tmp_path, max_body_bytes=2048)) as running:
        port = int(running.base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                f"POST {running.settings.path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {BEARER}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
            for _ in range(3):  # 3 KiB sent, far less than the body would be; the final chunk never is
                sock.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
            answer = sock.recv(65536).decode()
        assert answer.startswith("HTTP/1.1 413"), answer
        assert '"payload_too_large"' in answer


def test_accepted_delivery_keeps_unknown_fields_source_and_receipt_time(
    receiver: RunningReceiver, bearer: dict[str, str]
) -> None:
    payload = certificate("c-extra", newTopLevel={"nested": [1, 2]}, ruleData={"name": "n", "level": "gold"})
    before = datetime.now(UTC)
    response = receiver.post(payload, headers={**bearer, "X-Webhook-Source": "learning-platform-eu"})
    after = datetime.now(UTC)
    assert response.status_code == 200
    [event] = list(receiver.inbox.read_events())
    assert orjson.loads(event.payload) == payload  # stored exactly as sent, extras included
    assert event.source == "learning-platform-eu" and before <= event.received_at <= after
    assert event.certificate_id == "c-extra" and event.event_type == "certificate_completed"


def test_missing_source_header_is_recorded_as_null(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    response = receiver.post(certificate("c-nosource"), headers={**bearer, "X-Webhook-Source": ""})
    assert response.status_code == 200
    [event] = list(receiver.inbox.read_events())
    assert event.source in ("", None)


def test_wrong_method_or_path_get_json_errors(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    wrong_method = receiver.client.get(receiver.url, headers=bearer)
    wrong_path = receiver.client.post(receiver.base + "/webhooks/other", headers=bearer, json=certificate("c1"))
    assert (wrong_method.status_code, wrong_path.status_code) == (405, 404)
    assert wrong_method.json()["error"] == wrong_path.json()["error"] == "http_error"
    assert receiver.client.get(receiver.base + "/healthz").json()["status"] == "ok"
