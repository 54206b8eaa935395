"""The certificate webhook receiver as a Starlette app: `create_app(settings)`.

Order of checks: credential (401) before anything is read, then content type (415), size (413) and
payload (400). Every authenticated delivery ends in the inbox -- accepted ones as events, rejected ones
raw in the quarantine with the reason -- and 2xx/4xx is answered only once that write is on disk. If the
write fails the answer is 500, so the platform retries; that is the only 5xx: a body that breaks the judging
itself is refused with a 400 too (a retry would break it again)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeline.webhooks.auth import Authenticator
from pipeline.webhooks.committer import GroupCommitter
from pipeline.webhooks.event_clock import EventClock
from pipeline.webhooks.events import Delivery, PayloadError, Rejected, to_delivery
from pipeline.webhooks.http_io import (
    BodyTooLarge,
    error_response,
    header_map,
    is_json_media_type,
    json_response,
    read_bounded_body,
)
from pipeline.webhooks.metrics import ReceiverMetrics
from pipeline.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)


class CertificateReceiver:
    """The POST endpoint; one instance per app, sharing the group committer."""

    def __init__(self, settings: WebhookSettings, committer: GroupCommitter, metrics: ReceiverMetrics) -> None:
        self._metrics = metrics
        self._auth = Authenticator.from_settings(settings)
        self._clock = EventClock.from_settings(settings)
        self._committer = committer
        self._max_body = settings.max_body_bytes
        self._source_header = settings.source_header.lower()
        self._challenge = ", ".join(
            scheme for scheme, on in (("Bearer", settings.bearer_tokens), ("Basic", settings.basic_credentials)) if on
        )

    async def handle(self, request: Request) -> Response:
        started = time.perf_counter()
        outcome, response = await self._answer(request)
        self._metrics.observe(outcome, response.status_code, started)
        return response

    async def _answer(self, request: Request) -> tuple[str, Response]:
        """(outcome for the metrics, response)."""
        received_at = datetime.now(UTC)
        headers = header_map(request)
        refusal = self._auth.authenticate(headers)
        if refusal is not None:
            return "unauthorized", self._unauthorized(request, refusal)
        source = headers.get(self._source_header)
        content_type = headers.get("content-type")
        try:
            body = await read_bounded_body(request, headers, self._max_body)
        except ClientDisconnect:
            # The client went away (or the server closed a body that came too slowly): nobody to answer.
            log.info("webhook from %s: the client disconnected before the body was complete", _client(request))
            return "client_disconnected", error_response(499, "client_disconnected", "no complete body")
        except BodyTooLarge:
            reason = f"body larger than the {self._max_body}-byte limit (LESSONSYNC_WEBHOOK_MAX_BODY_BYTES)"
            rejected = Rejected(received_at, source, content_type, 413, reason, None)
            return "rejected", await self._reject(rejected, "payload_too_large")
        if not is_json_media_type(content_type):
            reason = f"content type {content_type!r} is not application/json"
            rejected = Rejected(received_at, source, content_type, 415, reason, body)
            return "rejected", await self._reject(rejected, "unsupported_media_type")
        try:
            delivery = to_delivery(
                body,
                received_at,
                source,
                reference_at=self._clock.reference_at(headers, received_at),
                declared_type=self._clock.declared_type(headers),
            )
        except PayloadError as exc:
            rejected = Rejected(received_at, source, content_type, 400, f"invalid payload: {exc}", body)
            return "rejected", await self._reject(rejected, "invalid_payload", field=exc.field)
        except Exception as exc:  # noqa: BLE001 - a body that breaks the judging would break it on every retry
            log.exception("webhook body from source %r could not be judged; refused (400) and kept raw", source)
            reason = f"invalid payload: it could not be judged ({type(exc).__name__}: {str(exc)[:200]})"
            rejected = Rejected(received_at, source, content_type, 400, reason, body)
            return "rejected", await self._reject(rejected, "invalid_payload", field="body")
        return await self._store(delivery)

    def _unauthorized(self, request: Request, refusal: str) -> Response:
        headers = {"WWW-Authenticate": self._challenge} if self._challenge else None
        log.info("webhook refused (401) from %s: %s", _client(request), refusal)
        body = {"error": "unauthorized", "message": f"{refusal}; send a configured webhook credential"}
        return json_response(401, body, headers)

    async def _store(self, delivery: Delivery) -> tuple[str, Response]:
        try:
            outcome = await self._committer.store(delivery)
        except Exception:  # noqa: BLE001 - any storage failure means: not acknowledged, retry
            log.exception("could not store certificate delivery %s in the inbox", delivery.certificate_id)
            return "storage_failed", error_response(
                500, "storage_failed", "the delivery could not be stored; retry later"
            )
        assert outcome is not None
        return "duplicate" if outcome.duplicate else "stored", json_response(
            200,
            {
                "status": "duplicate" if outcome.duplicate else "stored",
                "sequence": outcome.sequence,
                "event_type": delivery.event_type,
            },
        )

    async def _reject(self, rejected: Rejected, error: str, **extra: object) -> Response:
        """Quarantine the raw body, then answer the 4xx; 500 if even that cannot be stored."""
        try:
            await self._committer.store(rejected)
        except Exception:  # noqa: BLE001
            log.exception("could not quarantine a rejected delivery (%s)", rejected.reason)
            return error_response(500, "storage_failed", "the delivery could not be stored; retry later")
        log.info("webhook rejected (%d) from source %r: %s", rejected.status, rejected.source, rejected.reason)
        return error_response(rejected.status, error, rejected.reason, **extra)


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "unknown client"


class HeadLimits:
    """431 for a request head with more than `max_count` header lines or more than `max_bytes` of headers,
    before any route sees it. The server (h11) already refuses a head that grows past the size while it
    streams in; one that arrives whole in a single read is measured here."""

    def __init__(self, app: ASGIApp, max_count: int, max_bytes: int) -> None:
        self.app = app
        self.max_count = max_count
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            message = None
            if len(headers) > self.max_count:
                message = f"more than {self.max_count} request headers (LESSONSYNC_WEBHOOK_MAX_HEADER_COUNT)"
            elif sum(len(name) + len(value) + 4 for name, value in headers) > self.max_bytes:
                message = f"request headers over {self.max_bytes} bytes (LESSONSYNC_WEBHOOK_MAX_HEADER_BYTES)"
            if message is not None:
                response = error_response(431, "request_header_fields_too_large", message)
                response.headers["connection"] = "close"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(settings: WebhookSettings | None = None) -> Starlette:
    """The receiver app. Raises WebhookConfigError for an unsafe configuration (no credential)."""
    settings = settings if settings is not None else WebhookSettings()
    settings.check_servable()
    inbox = settings.resolved_inbox()
    committer = GroupCommitter(inbox, settings.commit_max_batch)
    metrics = ReceiverMetrics(inbox)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        committer.start()
        log.info("webhook receiver: POST %s, inbox %s, %s", settings.path, inbox.location, settings.auth_summary())
        try:
            yield
        finally:
            committer.stop()

    async def healthz(request: Request) -> Response:
        # The commit count lets the benchmark show how many deliveries share one fsync.
        return json_response(200, {"status": "ok", "inbox_commits": committer.transactions})

    async def metrics_endpoint(request: Request) -> Response:
        # The backlog gauges query the inbox: off the event loop.
        body = await asyncio.to_thread(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        # Wrong path or method: the JSON error body of every other answer, not Starlette's plain text.
        return error_response(exc.status_code, "http_error", f"{request.method} {request.url.path}: {exc.detail}")

    app = Starlette(
        exception_handlers={HTTPException: http_error},
        routes=[
            Route(settings.path, CertificateReceiver(settings, committer, metrics).handle, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        middleware=[Middleware(HeadLimits, max_count=settings.max_header_count, max_bytes=settings.max_header_bytes)],
        lifespan=lifespan,
    )
    # A path with a trailing slash is a 404: Starlette's redirect would build its Location from the Host header.
    app.router.redirect_slashes = False
    app.state.inbox = inbox
    app.state.committer = committer
    app.state.metrics = metrics
    return app
