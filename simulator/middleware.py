"""Pure ASGI middleware in front of the API: routes on the RAW path (so `%2F` inside an id stays inside
the id), stamps the simulated `Date` (offset by the date_offset_min fault), injects faults on /v1 requests and counts everything."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from simulator import fastroutes
from simulator.errors import error_body
from simulator.platform import Platform
from simulator.timeutil import MS_PER_MINUTE, http_date

Scope = dict[str, Any]
TRUNCATION_MESSAGE = "ASGI callable returned without completing response."
LATENCY_RECHECK_S = 0.05  # how often a delayed request looks at the latency again (a test may lower it)


class _HideDeliberateTruncation(logging.Filter):
    """uvicorn logs an error when a response is cut short; here that is the injected fault, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != TRUNCATION_MESSAGE


logging.getLogger("uvicorn.error").addFilter(_HideDeliberateTruncation())


class PlatformMiddleware:
    def __init__(self, app: Any, platform: Platform, *, fast_routes: bool = True) -> None:
        self.app = app
        self.platform = platform
        self.fast_routes = fast_routes  # hot listings without FastAPI's machinery (fastroutes.py)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("raw_path")
        if raw:  # route on the encoded path; handlers decode each path parameter themselves
            scope["path"] = raw.decode("latin-1").split("?", 1)[0]
        if not scope["path"].startswith("/v1/"):
            await self._serve(scope, receive, send)
            return
        stats = self.platform.stats
        arrived = stats.arrived()
        try:
            await self._serve(scope, receive, send)
        finally:  # logged with its query, so a test can tell the pages and the streams apart
            query = scope.get("query_string", b"").decode("latin-1")
            stats.answered(scope["path"] + (f"?{query}" if query else ""), arrived)

    async def _delayed(self, arrived: float) -> None:
        """Wait until the latency the faults name NOW has passed since `arrived`: lowering it (or clearing the
        faults) releases the requests already waiting, so a test can hold a client and let it go."""
        while (left := self.platform.faults.spec.latency_ms / 1000 - (time.monotonic() - arrived)) > 0:
            await asyncio.sleep(min(left, LATENCY_RECHECK_S))

    async def _serve(self, scope: Scope, receive: Any, send: Any) -> None:
        api = scope["path"].startswith("/v1/")
        faults = self.platform.faults
        spec = faults.spec
        status_box: list[int] = [0]
        date = http_date(self.platform.world.clock_ms + round(spec.date_offset_min * MS_PER_MINUTE)).encode()
        if api:
            count = faults.next_api_request()
            if spec.latency_ms:
                await self._delayed(time.monotonic())
            if spec.outage_s and faults.in_outage():
                await self._server_error(send, date, 503)
                self.platform.stats.request(f"{scope['method']} (injected outage)", 503)
                return
            if spec.rate_limit_every and count % spec.rate_limit_every == 0:
                await self._rate_limited(send, date, count // spec.rate_limit_every)
                self.platform.stats.request(f"{scope['method']} (injected fault)", 429)
                return
            if spec.error_rate and faults.rng.random() < spec.error_rate:
                status = faults.rng.choice((500, 502, 503))
                await self._server_error(send, date, status)
                self.platform.stats.request(f"{scope['method']} (injected fault)", status)
                return
        truncate = (
            api and scope["method"] == "GET" and spec.truncate_rate > 0 and faults.rng.random() < spec.truncate_rate
        )
        pending: dict[str, Any] = {}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"date", date)]
                if truncate and message["status"] == 200:
                    pending["start"] = message
                    return
            elif pending and message["type"] == "http.response.body":
                await self._truncated(send, pending, message)
                return
            await send(message)

        fast = fastroutes.match(scope["method"], scope["path"]) if api and self.fast_routes else None
        if fast is not None:  # a hot listing: same handlers, without FastAPI's per-request machinery
            route, values = fast
            response = fastroutes.serve(
                self.platform, route, values, scope.get("query_string", b""), _header(scope, b"authorization")
            )
            await response(scope, receive, send_wrapper)
            self.platform.stats.request(f"{scope['method']} {route.template}", status_box[0])
            return
        await self.app(scope, receive, send_wrapper)
        self._count(scope, status_box[0])

    def _count(self, scope: Scope, status: int) -> None:
        route = scope.get("route")
        path = scope["path"]
        template = getattr(route, "path", None) or ("unmatched" if path.startswith("/v1/") else path)
        self.platform.stats.request(f"{scope['method']} {template}", status)

    async def _rate_limited(self, send: Any, date: bytes, nth: int) -> None:
        # alternate the three forms a client must honour: seconds, "0", and an HTTP-date (wall clock: it
        # is about real waiting, unlike the simulated Date header)
        retry_after = ("1", "0", http_date(int(time.time() * 1000) + 1000))[nth % 3]
        self.platform.stats.fault("429")
        await _send_error(
            send,
            429,
            "rate limit reached: retry after the Retry-After delay",
            date,
            [(b"retry-after", retry_after.encode())],
        )

    async def _server_error(self, send: Any, date: bytes, status: int) -> None:
        self.platform.stats.fault("5xx")
        await _send_error(send, status, "injected server fault: retry the request", date, [])

    async def _truncated(self, send: Any, pending: dict[str, Any], message: dict[str, Any]) -> None:
        body: bytes = message.get("body", b"")
        start = pending.pop("start")
        cut = body[: max(1, len(body) // 2)]
        self.platform.stats.fault("truncated")
        if self.platform.faults.rng.random() < 0.5:
            # declared length kept, connection dropped mid-body: the client sees an incomplete read
            await send(start)
            await send({"type": "http.response.body", "body": cut, "more_body": True})
            return
        headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
        start["headers"] = [*headers, (b"content-length", str(len(cut)).encode())]
        await send(start)  # a complete response whose JSON is cut short
        await send({"type": "http.response.body", "body": cut, "more_body": False})


def _header(scope: Scope, name: bytes) -> str | None:
    """The first header `name` (lower case), as Starlette's request.headers.get would return it."""
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _send_error(send: Any, status: int, message: str, date: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    body = error_body(status, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"date", date),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
