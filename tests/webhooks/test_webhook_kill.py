"""A receiver process killed with SIGKILL while 50 senders post: every delivery that got a 2xx is in the
inbox afterwards, the inbox is intact, and a restarted receiver carries on from it."""

from __future__ import annotations

import signal
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from webhook_helpers import BEARER, certificate, receiver_process

from pipeline.webhooks.inbox import Inbox

SENDERS = 50
ACKS_BEFORE_KILL = 400


class Senders:
    """50 threads, each a platform delivery worker posting distinct certificates until the line dies."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.acknowledged: set[str] = set()
        self.lock = threading.Lock()
        self.enough = threading.Event()
        self.threads = [threading.Thread(target=self._send, args=(n,), daemon=True) for n in range(SENDERS)]

    def _send(self, sender: int) -> None:
        headers = {"Authorization": f"Bearer {BEARER}", "X-Webhook-Source": "kill-test"}
        with httpx.Client(timeout=10) as client:
            for n in range(100_000):
                cid = f"s{sender}-n{n}"
                try:
                    response = client.post(self.url, json=certificate(cid), headers=headers)
                except httpx.TransportError:
                    return  # the receiver is gone
                if 200 <= response.status_code < 300:
                    with self.lock:
                        self.acknowledged.add(cid)
                        if len(self.acknowledged) >= ACKS_BEFORE_KILL:
                            self.enough.set()


@pytest.mark.slow
def test_sigkill_under_load_loses_no_acknowledged_delivery(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    env = {"LESSONSYNC_WEBHOOK_BEARER_TOKENS": BEARER}
    with receiver_process(inbox.path, env) as (process, url):
        senders = Senders(url)
        for thread in senders.threads:
            thread.start()
        assert senders.enough.wait(timeout=60), "senders did not get enough acknowledgements"
        process.send_signal(signal.SIGKILL)  # mid-stream: 50 requests in flight
        process.wait(timeout=20)
        for thread in senders.threads:
            thread.join(timeout=30)
    acknowledged = set(senders.acknowledged)
    stored = {event.certificate_id for event in inbox.read_events()}
    assert len(acknowledged) >= ACKS_BEFORE_KILL
    assert acknowledged - stored == set(), f"{len(acknowledged - stored)} acknowledged deliveries lost"
    with closing(sqlite3.connect(inbox.path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    # Restarted on the same file, the receiver goes on with the next sequence numbers.
    before = inbox.max_sequence()
    with receiver_process(inbox.path, env) as (_, url):
        response = httpx.post(url, json=certificate("after-restart"), headers={"Authorization": f"Bearer {BEARER}"})
    assert response.status_code == 200 and response.json()["sequence"] > before
