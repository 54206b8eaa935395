"""Certificate webhook deliveries: a background sender thread POSTs each event (Certificate payload,
X-Webhook-Source, the configured credential) at least once, retries non-2xx answers and connection errors
with bounded exponential backoff, and re-sends a few successful ones on purpose (duplicates).

Extra headers a receiver may use but must not rely on (other platforms need not send them):
`X-Webhook-Event` (certificate_completed | certificate_expired) and `Date` = the SIMULATED instant of
the event, so "expires in the past at receipt" can be judged on the platform's clock.
"""

from __future__ import annotations

import base64
import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from simulator.certificates import CertificateEvent
from simulator.timeutil import http_date

log = logging.getLogger(__name__)
MAX_BACKOFF_SECONDS = 2.0


def auth_headers(spec: str | None) -> dict[str, str]:
    """Headers for "bearer:TOKEN", "basic:USER:PASSWORD" or "header:NAME:VALUE" (None = no credential)."""
    if not spec:
        return {}
    scheme, _, rest = spec.partition(":")
    scheme = scheme.strip().lower()
    if scheme == "bearer" and rest:
        return {"Authorization": f"Bearer {rest}"}
    if scheme == "basic" and ":" in rest:
        return {"Authorization": "Basic " + base64.b64encode(rest.encode()).decode()}
    name, _, value = rest.partition(":")
    if scheme == "header" and name.strip() and value:
        return {name.strip(): value}
    raise ValueError(
        f"webhook auth scheme {scheme!r} is not understood: use bearer:TOKEN, basic:USER:PASSWORD "
        "or header:NAME:VALUE (the credential itself is not shown here)"
    )


@dataclass
class _Delivery:
    event: CertificateEvent
    attempt: int = 0
    not_before: float = 0.0
    duplicate: bool = False


@dataclass
class _Counters:
    enqueued: int = 0
    delivered: int = 0
    attempts: int = 0
    retries: int = 0
    failed: int = 0
    duplicates: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    by_event: Counter[str] = field(default_factory=Counter)


class WebhookSender:
    def __init__(
        self,
        url: str,
        auth: str | None,
        source: str,
        *,
        seed: int,
        max_attempts: int = 8,
        backoff_seconds: float = 0.05,
        duplicate_rate: float = 0.05,
        timeout: float = 5.0,
    ) -> None:
        self.url = url
        self._headers = {"Content-Type": "application/json", "X-Webhook-Source": source, **auth_headers(auth)}
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._duplicate_rate = duplicate_rate
        self._rng = random.Random(f"webhooks:{seed}")
        self._queue: list[_Delivery] = []
        self._in_flight = 0
        self._cond = threading.Condition()
        self._stop = False
        self._counters = _Counters()
        self._client = httpx.Client(timeout=timeout)
        self._thread = threading.Thread(target=self._run, name="webhook-sender", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:  # the credential stays out of reprs
        return f"WebhookSender(url={self.url!r}, pending={len(self._queue)})"

    def enqueue(self, events: list[CertificateEvent]) -> None:
        with self._cond:
            for event in events:
                self._queue.append(_Delivery(event))
                self._counters.enqueued += 1
            self._cond.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Block until every queued delivery succeeded or gave up; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._in_flight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def stats(self) -> dict[str, Any]:
        with self._cond:
            c = self._counters
            return {
                "enqueued": c.enqueued,
                "delivered": c.delivered,
                "attempts": c.attempts,
                "retries": c.retries,
                "failed": c.failed,
                "duplicates": c.duplicates,
                "pending": len(self._queue) + self._in_flight,
                "by_status": dict(c.by_status),
                "by_event": dict(c.by_event),
            }

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout=10)
        self._client.close()

    def _next(self) -> _Delivery | None:
        """The first delivery whose backoff has passed (waits for one); None when stopping."""
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                for k, delivery in enumerate(self._queue):
                    if delivery.not_before <= now:
                        self._in_flight += 1
                        return self._queue.pop(k)
                waits = [d.not_before - now for d in self._queue]
                self._cond.wait(min(waits) if waits else None)
            return None

    def _run(self) -> None:
        while (delivery := self._next()) is not None:
            ok, status = self._post(delivery)
            with self._cond:
                self._in_flight -= 1
                self._settle(delivery, ok, status)
                self._cond.notify_all()

    def _post(self, delivery: _Delivery) -> tuple[bool, str]:
        event = delivery.event
        headers = {**self._headers, "X-Webhook-Event": event.event_type, "Date": http_date(event.at_ms)}
        try:
            response = self._client.post(self.url, content=orjson.dumps(event.payload), headers=headers)
        except httpx.HTTPError as exc:
            return False, type(exc).__name__
        return 200 <= response.status_code < 300, str(response.status_code)

    def _settle(self, delivery: _Delivery, ok: bool, status: str) -> None:
        c = self._counters
        c.attempts += 1
        c.by_status[status] += 1
        if ok:
            c.delivered += 1
            c.by_event[delivery.event.event_type] += 1
            if not delivery.duplicate and self._rng.random() < self._duplicate_rate:
                c.duplicates += 1  # at-least-once, for real: the receiver must deduplicate
                self._queue.append(_Delivery(delivery.event, duplicate=True, not_before=time.monotonic() + 0.01))
            return
        delivery.attempt += 1
        if delivery.attempt >= self._max_attempts:
            c.failed += 1
            log.warning(
                "webhook delivery of certificate %s gave up after %d attempts (last: %s)",
                delivery.event.payload.get("_id"),
                delivery.attempt,
                status,
            )
            return
        c.retries += 1
        delivery.not_before = time.monotonic() + min(MAX_BACKOFF_SECONDS, self._backoff * 2 ** (delivery.attempt - 1))
        self._queue.append(delivery)
