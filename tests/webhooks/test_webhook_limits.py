"""The receiver's limits on what any client may hold, each on a real server over raw sockets: head size and
count, head and body deadlines (a Content-Length that never arrives, a trickled body), keep-alive idle
timeout, the connection cap (eviction of the longest-idle connection, 503 when none is idle); the shortest head
deadline the settings accept still takes deliveries; and the small things an internet-facing server must get right
(disconnects, trailing slash, one log line per rejection, /metrics)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from webhook_helpers import BEARER, RunningReceiver, certificate, make_settings, receiver_process, serve_in_thread

from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.settings import WebhookSettings

FAST = {
    "header_timeout": 0.4,
    "body_timeout": 0.4,
    "min_body_rate": 200.0,
    "keep_alive_timeout": 0.4,
    "max_header_bytes": 4096,
    "max_header_count": 20,
    "max_connections": 4,
}


@pytest.fixture(params=["httptools", "h11"])
def limited(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningReceiver]:
    """Every limit holds with either of uvicorn's parsers (httptools is what `auto` picks when installed)."""
    with serve_in_thread(make_settings(tmp_path, **FAST), parser=request.param) as running:
        yield running


def _connect(receiver: RunningReceiver) -> socket.socket:
    host, port = receiver.base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _head(receiver: RunningReceiver, extra: str = "", length: int | None = None) -> bytes:
    lines = [
        f"POST {receiver.settings.path} HTTP/1.1",
        "Host: receiver.test",
        f"Authorization: Bearer {BEARER}",
        "Content-Type: application/json",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (the tests' deadlines are far below the socket timeout)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _delivery(cid: str) -> bytes:
    return orjson.dumps(certificate(cid))


def test_oversized_head_is_refused_and_closed(limited: RunningReceiver) -> None:
    # Whole in one write, and streamed in pieces (refused as it grows, without waiting for its end).
    with _connect(limited) as sock:
        sock.sendall(_head(limited, extra="X-Filler: " + "a" * 8000 + "\r\n", length=2) + b"{}")
        answer = _read_all(sock)
    assert _status(answer) == 431
    assert b"LESSONSYNC_WEBHOOK_MAX_HEADER_BYTES" in answer
    with _connect(limited) as sock:
        sock.sendall(_head(limited)[:-2] + b"X-Filler: ")
        try:
            for _ in range(100):  # 100 KB of one header, 1 KB at a time
                sock.sendall(b"a" * 1024)
                time.sleep(0.001)
        except OSError:
            pass  # closed by the server mid-stream
        answer = _read_all(sock)
    assert _status(answer) == 431
    assert limited.inbox.count_quarantined() == 0


def test_too_many_headers_get_431(limited: RunningReceiver) -> None:
    body = _delivery("cert-many-headers")
    many = "".join(f"X-H{i}: v\r\n" for i in range(40))
    with _connect(limited) as sock:
        sock.sendall(_head(limited, extra=many, length=len(body)) + body)
        answer = _read_all(sock)
    assert _status(answer) == 431
    assert b"LESSONSYNC_WEBHOOK_MAX_HEADER_COUNT" in answer
    assert limited.inbox.count_events() == 0


def test_a_head_that_never_completes_gets_408(limited: RunningReceiver) -> None:
    with _connect(limited) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /webhooks/certificates HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        answer = _read_all(sock)
        waited = time.monotonic() - started
    assert _status(answer) == 408
    assert FAST["header_timeout"] - 0.05 <= waited < FAST["header_timeout"] + 2  # the two clocks start apart


def test_a_content_length_that_never_arrives_gets_408(
    limited: RunningReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with _connect(limited) as sock:
        started = time.monotonic()
        sock.sendall(_head(limited, length=500) + b'{"_id": "cert-short"')
        answer = _read_all(sock)
        waited = time.monotonic() - started
    assert _status(answer) == 408
    assert waited < FAST["body_timeout"] + 2
    assert limited.inbox.count_events() == 0
    deadline = time.monotonic() + 5  # the app learns of the disconnect on the server's thread
    while not any("disconnected before the body was complete" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "no INFO line for the disconnect"
        time.sleep(0.02)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_trickled_body_below_the_minimum_rate_gets_408(limited: RunningReceiver) -> None:
    body = _delivery("cert-trickle")
    with _connect(limited) as sock:
        sock.sendall(_head(limited, length=len(body)))
        answer = b""
        for byte in body:  # 1 byte per 20 ms = 50 B/s, under the 200 B/s floor
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.02)
            sock.setblocking(False)
            try:
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
            if answer:
                break
        answer += _read_all(sock)
    assert _status(answer) == 408
    assert limited.inbox.count_events() == 0


def test_a_body_at_the_minimum_rate_is_accepted(limited: RunningReceiver) -> None:
    body = _delivery("cert-steady")
    with _connect(limited) as sock:
        sock.sendall(_head(limited, length=len(body)))
        for start in range(0, len(body), 100):  # 100 bytes per 0.1 s = 1,000 B/s, over 2x the body timeout
            sock.sendall(body[start : start + 100])
            time.sleep(0.1)
        answer = sock.recv(65536)
    assert _status(answer) == 200
    assert limited.inbox.count_events() == 1


def test_an_idle_keep_alive_connection_is_closed(limited: RunningReceiver) -> None:
    body = _delivery("cert-keepalive")
    with _connect(limited) as sock:
        sock.sendall(_head(limited, length=len(body)) + body)
        assert _status(sock.recv(65536)) == 200
        started = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the server, not by the 5 s socket timeout
        assert time.monotonic() - started < FAST["keep_alive_timeout"] + 2


def test_the_connection_cap_evicts_the_longest_idle_connection(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, max_connections=4, header_timeout=30)
    with serve_in_thread(settings) as receiver:
        idle = [_connect(receiver) for _ in range(4)]
        try:
            time.sleep(0.05)
            response = receiver.client.post(  # a new connection beyond the cap
                receiver.url, json=certificate("cert-over-cap"), headers={"Authorization": f"Bearer {BEARER}"}
            )
            assert response.status_code == 200
            assert idle[0].recv(65536) == b""  # the oldest idle one made room, closed without an answer
            metrics = receiver.client.get(receiver.base + "/metrics").text
            assert 'lessonsync_webhook_connections_closed_total{reason="evicted"} 1.0' in metrics
        finally:
            for sock in idle:
                sock.close()


def test_the_connection_cap_answers_503_when_every_connection_is_busy(limited: RunningReceiver) -> None:
    busy = [_connect(limited) for _ in range(FAST["max_connections"])]
    try:
        for sock in busy:  # each inside a request: head in, body still expected
            sock.sendall(_head(limited, length=1000))
        time.sleep(0.1)
        with _connect(limited) as extra:
            answer = _read_all(extra)
        assert _status(answer) == 503
        assert b"too many connections" in answer
    finally:
        for sock in busy:
            sock.close()


def test_the_shortest_head_deadline_accepted_still_takes_deliveries(tmp_path: Path) -> None:
    """LESSONSYNC_WEBHOOK_HEADER_TIMEOUT has a floor a receiver works at: `lessonsync receive` set to it stores
    deliveries sent each on a new connection (at 1e-9 the deadline passed before any head arrived: 408 to all)."""
    floor = next(
        (bound.ge for bound in WebhookSettings.model_fields["header_timeout"].metadata if hasattr(bound, "ge")), None
    )
    assert floor is not None and 0 < floor <= 1, "LESSONSYNC_WEBHOOK_HEADER_TIMEOUT has no floor"
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    env = {"LESSONSYNC_WEBHOOK_BEARER_TOKENS": BEARER, "LESSONSYNC_WEBHOOK_HEADER_TIMEOUT": str(floor)}
    sent = [f"cert-floor-{n}" for n in range(5)]
    with receiver_process(inbox.path, env) as (_, url):
        answers = [
            httpx.post(url, json=certificate(cid), headers={"Authorization": f"Bearer {BEARER}"}).status_code
            for cid in sent
        ]
    assert answers == [200] * len(sent)
    assert [event.certificate_id for event in inbox.read_events()] == sent


def test_trailing_slash_is_a_404_without_redirect(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    response = receiver.client.post(
        receiver.url + "/", json=certificate("c"), headers={**bearer, "Host": "evil.example"}
    )
    assert response.status_code == 404
    assert "location" not in response.headers


def test_each_rejection_is_logged_once(
    receiver: RunningReceiver, bearer: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    response = receiver.post({"_id": 5}, headers=bearer)
    assert response.status_code == 400
    lines = [r for r in caplog.records if "webhook rejected" in r.getMessage()]
    assert len(lines) == 1, [r.name for r in lines]


def test_metrics_count_deliveries_and_the_inbox_backlog(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    assert receiver.post(certificate("cert-m1"), headers=bearer).status_code == 200
    assert receiver.post(certificate("cert-m1"), headers=bearer).status_code == 200  # a redelivery
    assert receiver.post({"_id": 5}, headers=bearer).status_code == 400
    assert receiver.post(certificate("cert-m2")).status_code == 401
    receiver.inbox.record_loaded(0)
    text = receiver.client.get(receiver.base + "/metrics").text
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}
    assert samples['lessonsync_webhook_deliveries_total{outcome="stored",status="200"}'] == 1
    assert samples['lessonsync_webhook_deliveries_total{outcome="duplicate",status="200"}'] == 1
    assert samples['lessonsync_webhook_deliveries_total{outcome="rejected",status="400"}'] == 1
    assert samples['lessonsync_webhook_deliveries_total{outcome="unauthorized",status="401"}'] == 1
    assert samples["lessonsync_webhook_request_duration_seconds_count"] == 4
    assert samples["lessonsync_inbox_up"] == 1
    assert samples["lessonsync_inbox_depth"] == 1
    assert samples["lessonsync_inbox_oldest_unloaded_age_seconds"] >= 0
    receiver.inbox.record_loaded(1)
    text = receiver.client.get(receiver.base + "/metrics").text
    assert "lessonsync_inbox_depth 0.0" in text
