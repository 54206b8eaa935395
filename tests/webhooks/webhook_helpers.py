"""Shared helpers of the webhook tests: certificate payloads and a real receiver on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from pipeline.webhooks.app import create_app
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.server import server_config
from pipeline.webhooks.settings import WebhookSettings

PAST = "2020-01-01T00:00:00.000Z"
FUTURE = "2040-01-01T00:00:00.000Z"
REPO = Path(__file__).resolve().parents[2]

BEARER = "bearer-token-under-test-7f3a"
BEARER_NEXT = "bearer-token-rotated-in-91c2"
BASIC_USER, BASIC_PASSWORD = "platform", "basic-password-under-test-55e1"
API_KEY = "api-key-under-test-0b9d"
SECRETS = (BEARER, BEARER_NEXT, BASIC_PASSWORD, API_KEY)


def certificate(
    cid: str, expires: str | None = FUTURE, updated_at: str = "2026-11-01T10:00:00.000Z", **fields: Any
) -> dict[str, Any]:
    """A full Certificate payload as the platform sends it (API spelling)."""
    return {
        "_id": cid,
        "_userId": "user-1",
        "_ownerId": "owner-1",
        "_badgeId": "badge-1",
        "creationDate": "2026-10-01T09:00:00.000Z",
        "expires": expires,
        "disabled": False,
        "expiryReminderSent": expires == PAST,
        "_lessonActiveIds": ["al-1", "al-2"],
        "ruleData": {
            "type": "lesson",
            "name": "Sécurité",
            "description": "Pass 2 lessons",
            "validityDurationDays": 365,
        },
        "createdAt": "2026-10-01T09:00:00.000Z",
        "updatedAt": updated_at,
        "__v": 0,
        **fields,
    }


def make_settings(tmp_path: Path, **overrides: object) -> WebhookSettings:
    values: dict[str, object] = {
        "bearer_tokens": f"{BEARER},{BEARER_NEXT}",
        "basic_credentials": f"{BASIC_USER}:{BASIC_PASSWORD}",
        "api_keys": API_KEY,
        "inbox_path": tmp_path / "inbox.sqlite3",
        **overrides,
    }
    return WebhookSettings(**values)  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningReceiver:
    url: str  # the POST endpoint
    base: str
    inbox: Inbox
    settings: WebhookSettings
    client: httpx.Client  # one pool for the test: a new client per request costs an SSL context each

    def post(
        self, body: Any = None, *, content: bytes | None = None, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        all_headers = {"Content-Type": "application/json", "X-Webhook-Source": "test-platform", **(headers or {})}
        if content is None:
            return self.client.post(self.url, json=body, headers=all_headers, **kwargs)
        return self.client.post(self.url, content=content, headers=all_headers, **kwargs)


@contextmanager
def serve_in_thread(settings: WebhookSettings, parser: str = "auto") -> Iterator[RunningReceiver]:
    """The real app on a real uvicorn server in a thread of the test process (so caplog sees its logs);
    `parser`: the bounded protocol's HTTP parser (httptools when installed, or h11). The server takes a socket
    bound here, so no other test's server can take its port between choosing it and listening on it."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = int(listening.getsockname()[1])
    app = create_app(settings)
    server = uvicorn.Server(
        server_config(
            app,
            settings,
            host="127.0.0.1",
            port=port,
            on_close=app.state.metrics.connection_closed,
            parser=parser,
            log_level="info",
            log_config=None,
            access_log=False,
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            listening.close()
            raise RuntimeError("receiver thread did not start")
        time.sleep(0.02)
    base = f"http://127.0.0.1:{port}"
    client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=64))
    try:
        yield RunningReceiver(base + settings.path, base, Inbox(settings.resolved_inbox_path()), settings, client)
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=20)
        listening.close()


@contextmanager
def receiver_process(inbox_path: Path, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`lessonsync receive` as its own process; yields (process, POST url). Killed on exit if still alive.

    A port chosen free can be taken by another test's server before the receiver listens on it; that server
    would then answer in the receiver's place. So the receiver counts as up only once its own log says it
    listens on the port, and a port found taken is given up for another."""
    full_env = {**os.environ, "LESSONSYNC_WEBHOOK_INBOX_PATH": str(inbox_path), **env}
    for _ in range(5):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "receive", "--port", str(port)],
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output, reader = _drain(process)  # also keeps a full pipe from blocking the receiver
        base = f"http://127.0.0.1:{port}"
        try:
            if _wait_listening(base, process, output, reader):
                _wait_healthy(base, process, output)
                yield process, base + "/webhooks/certificates"
                return
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(timeout=20)
    raise RuntimeError("receiver found its port taken five times over")


def _drain(process: subprocess.Popen[bytes]) -> tuple[list[str], threading.Thread]:
    """The process's output lines as they come, and the thread reading them (it ends with the output)."""
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for raw in process.stdout:
                lines.append(raw.decode(errors="replace"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def _wait_listening(base: str, process: subprocess.Popen[bytes], output: list[str], reader: threading.Thread) -> bool:
    """True once the receiver says it listens on `base`; False when it exits because the port is taken."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(f"running on {base} " in line for line in output):
            return True
        if process.poll() is not None:
            reader.join(timeout=5)  # the process's last lines
            said = "".join(output)
            if "address already in use" in said.lower():
                return False
            raise RuntimeError(f"receiver exited with {process.returncode}: {said}")
        time.sleep(0.05)
    raise RuntimeError(f"receiver did not say it listens on {base} in 30 s: {''.join(output)}")


def _wait_healthy(base: str, process: subprocess.Popen[bytes], output: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"receiver exited with {process.returncode}: {''.join(output)}")
        try:
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("receiver did not become healthy in 30 s")
