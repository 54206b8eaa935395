"""The receiver's HTTP server: uvicorn with limits on what an unauthenticated client may hold.

uvicorn alone bounds idle keep-alive connections (and, with h11, the head's size), but nothing else: a
client may send its head or its body as slowly as it likes, and every open connection costs a file
descriptor. The bounded protocols (uvicorn's httptools one when httptools is installed, as uvicorn itself
prefers it, else its h11 one) add, per connection:

- head limits checked on the raw bytes before the parser sees them: over `max_header_bytes` or
  `max_header_count` lines, 431 and close (parsing 5,000 header lines costs far more than counting them);
- a head deadline: the request head must be complete `header_timeout` seconds after the connection opens
  (or `keep_alive_timeout + header_timeout` after the previous response), else 408 and close;
- a body deadline: the body must be complete `body_timeout` seconds after the head, plus one second per
  `min_body_rate` bytes received, so a client sending at least that rate is never cut off, else 408 and
  close (this is also the answer to a Content-Length larger than what is sent);
- a connection cap: beyond `max_connections`, the connection that has waited longest for a request head
  (nothing of value in flight; those that never completed a request before idle keep-alive ones) is closed
  to make room; when every connection is inside a request, the new one gets 503 and is closed.

These are the protocol's own timers on the event loop: no thread, no per-request task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import orjson
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional (uvicorn[standard]); h11 always comes with uvicorn
    HttpToolsProtocol = None  # type: ignore[assignment, misc]

from pipeline.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

HEAD, BODY, APP = "head", "body", "app"  # what the connection is waiting for: a head, a body, or the app
CLOSING = "closing"  # answered and half-closed: what still arrives is discarded until the close
# A refused client may still be sending; closing at once would make the kernel reset the connection and
# drop our answer from its receive buffer. So: answer, shut our side, discard its bytes, close shortly --
# or at once past a small budget, so that a client flooding bytes costs no more than that to drain.
LINGER_SECONDS = 1.0
LINGER_BYTES = 64 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float
    body_timeout: float
    min_body_rate: float  # bytes per second
    keep_alive_timeout: float
    max_connections: int
    max_header_bytes: int
    max_header_count: int
    on_close: Callable[[str], None] = lambda reason: None  # why the server closed a connection (metrics)

    @classmethod
    def from_settings(
        cls, settings: WebhookSettings, on_close: Callable[[str], None] | None = None
    ) -> ConnectionLimits:
        return cls(
            header_timeout=settings.header_timeout,
            body_timeout=settings.body_timeout,
            min_body_rate=settings.min_body_rate,
            keep_alive_timeout=settings.keep_alive_timeout,
            max_connections=settings.max_connections,
            max_header_bytes=settings.max_header_bytes,
            max_header_count=settings.max_header_count,
            on_close=on_close or (lambda reason: None),
        )


def _plain_response(status: int, reason: str, message: str) -> bytes:
    body = orjson.dumps({"error": reason.lower().replace(" ", "_"), "message": message})
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


HEAD_TIMEOUT = _plain_response(408, "Request Timeout", "request head not received in time")
BODY_TIMEOUT = _plain_response(408, "Request Timeout", "request body not received in time")
HEAD_TOO_LARGE = _plain_response(
    431,
    "Request Header Fields Too Large",
    "request head over LESSONSYNC_WEBHOOK_MAX_HEADER_BYTES or LESSONSYNC_WEBHOOK_MAX_HEADER_COUNT",
)
OVER_CAPACITY = _plain_response(503, "Service Unavailable", "too many connections; retry later")


class _Bounded:
    """The limits, for either uvicorn protocol: the subclass reports when a head or a body starts and when
    the request is complete (see the module doc). Attributes other than ours are uvicorn's."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any
    client: tuple[str, int] | None

    limits: ClassVar[ConnectionLimits]
    # Connections waiting for a request head, longest-waiting first (a dict keeps insertion order), so the
    # cap's eviction takes the first in O(1): those that have not completed a request yet (where idle and
    # slowloris clients stay), then idle keep-alive ones (a client that has sent a request, whose next one
    # would fail if its connection closed just as it is sent). One pair per server (bounded_protocol).
    waiting: ClassVar[dict[_Bounded, None]]
    kept_alive: ClassVar[dict[_Bounded, None]]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._timer: asyncio.TimerHandle | None = None
        self._phase = HEAD
        self._head_bytes = self._head_lines = 0
        self._body_started = 0.0
        self._body_bytes = 0
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._evict_one():
            self._close_with(OVER_CAPACITY, "over_capacity")
            return
        self.waiting[self] = None
        self._arm(self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        self._forget()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase == CLOSING:
            self._linger_budget -= len(data)
            if self._linger_budget < 0:
                self.transport.close()
            return
        if self._phase == BODY:
            self._body_bytes += len(data)
        elif self._phase == HEAD and self._head_too_large(data):
            return
        super().data_received(data)

    def _head_too_large(self, data: bytes) -> bool:
        """Measure the head before h11 parses it: parsing thousands of header lines costs far more than
        counting them, and a head over the limits is refused here (431) without being parsed."""
        end = data.find(b"\r\n\r\n")
        head = data if end < 0 else data[: end + 4]
        self._head_bytes += len(head)
        self._head_lines += head.count(b"\n")
        if self._head_bytes <= self.limits.max_header_bytes and self._head_lines <= self.limits.max_header_count + 2:
            return False
        log.debug("closed a connection from %s: request head over the limits (431)", self._peer())
        self._close_with(HEAD_TOO_LARGE, "header_too_large")
        return True

    def _enter_head_after_response(self) -> None:
        """A new cycle: the next head may follow an idle keep-alive period."""
        if self._phase not in (HEAD, CLOSING):
            self._phase = HEAD
            self._head_bytes = self._head_lines = 0
            self.kept_alive[self] = None
            self._arm(self.limits.keep_alive_timeout + self.limits.header_timeout)

    def _enter_body(self) -> None:
        if self._phase not in (BODY, CLOSING):
            self._phase = BODY
            self._forget()
            self._body_started, self._body_bytes = self.loop.time(), 0
            self._arm(self.limits.body_timeout)

    def _enter_app(self) -> None:
        """The whole request is in: the app's time is not ours to bound."""
        if self._phase not in (APP, CLOSING):
            self._phase = APP
            self._forget()
            self._cancel()

    def _arm(self, delay: float) -> None:
        self._cancel()
        self._timer = self.loop.call_later(delay, self._deadline_passed)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline_passed(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._phase == BODY:
            allowed = self._body_started + self.limits.body_timeout + self._body_bytes / self.limits.min_body_rate
            if self.loop.time() < allowed:
                self._timer = self.loop.call_at(allowed, self._deadline_passed)
                return
            log.info("closed a connection from %s: request body not received in time (408)", self._peer())
            self._close_with(BODY_TIMEOUT, "body_timeout")
        elif self._phase == HEAD:
            log.debug("closed a connection from %s: request head not received in time (408)", self._peer())
            self._close_with(HEAD_TIMEOUT, "header_timeout")

    def _close_with(self, answer: bytes, reason: str) -> None:
        """Answer (unless a response is already under way) and close. The app, if it is waiting for the
        body, sees a disconnect and its own answer is dropped."""
        cycle = self.cycle
        in_response = cycle is not None and cycle.response_started and not cycle.response_complete
        if not in_response:
            self.transport.write(answer)
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.limits.on_close(reason)
        if in_response or not self.transport.can_write_eof():
            self._drop()
            return
        self._cancel()
        self._forget()
        self.connections.discard(self)  # no longer counts against the cap
        self._phase = CLOSING
        self._linger_budget = LINGER_BYTES
        self.transport.write_eof()
        self._timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _drop(self) -> None:
        self._cancel()
        self._forget()
        self.connections.discard(self)
        self.transport.close()

    def _forget(self) -> None:
        self.waiting.pop(self, None)
        self.kept_alive.pop(self, None)

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a request head, to make room; False if none."""
        oldest = next(iter(self.waiting), None) or next(iter(self.kept_alive), None)
        if oldest is None:
            return False
        log.debug("connection cap reached: closing the longest-idle connection from %s", oldest._peer())
        oldest._drop()
        self.limits.on_close("evicted")
        return True

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client"


class BoundedH11Protocol(_Bounded, H11Protocol):
    """uvicorn's h11 protocol with the limits: h11's own state tells where the request is."""

    def handle_events(self) -> None:
        super().handle_events()
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            self._enter_head_after_response()
        elif state is h11.SEND_BODY:
            self._enter_body()
        else:
            self._enter_app()


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(_Bounded, HttpToolsProtocol):  # type: ignore[misc, valid-type]
        """uvicorn's httptools protocol with the limits: the parser's callbacks tell where the request is.
        The next head is awaited once both the request and its response are complete, in either order."""

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._request_done = False

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._enter_body()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._request_done = True
            self._after_request_or_response()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._after_request_or_response()

        def _after_request_or_response(self) -> None:
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if not getattr(self, "_request_done", False):
                return  # the body is still expected (a response sent early): its deadline goes on
            if (cycle is None or cycle.response_complete) and not self.pipeline:
                self._enter_head_after_response()
            else:
                self._enter_app()


def bounded_protocol(limits: ConnectionLimits, parser: str = "auto") -> type[_Bounded]:
    """The protocol class uvicorn instantiates per connection, carrying these limits and this server's
    waiting connections. `parser`: "httptools", "h11", or "auto" (httptools when installed)."""
    base: type[_Bounded]
    if parser == "h11" or (parser == "auto" and HttpToolsProtocol is None):
        base = BoundedH11Protocol
    elif HttpToolsProtocol is not None:
        base = BoundedHttpToolsProtocol
    else:
        raise ValueError("the httptools parser is not installed (pip install httptools)")
    return type(base.__name__, (base,), {"limits": limits, "waiting": {}, "kept_alive": {}})


def server_config(
    app: Any,
    settings: WebhookSettings,
    *,
    host: str,
    port: int,
    on_close: Callable[[str], None] | None = None,
    parser: str = "auto",
    **options: Any,
) -> uvicorn.Config:
    """The uvicorn configuration of the receiver, with every limit of `settings` applied."""
    limits = ConnectionLimits.from_settings(settings, on_close)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=bounded_protocol(limits, parser),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
        # uvicorn's own limit_concurrency counts idle connections too and answers 503 only once a head is in;
        # the protocol's cap above replaces it.
        **options,
    )
