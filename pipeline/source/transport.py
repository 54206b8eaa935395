"""HTTP transport: one httpx.AsyncClient (connection reuse), explicit timeouts, a semaphore bounding requests
in flight, bearer auth with one renewal on 401, tenacity retries, server time from the Date header.

Every request is counted (`stats`) so runs can report requests and retries. Errors name the method,
endpoint, parameters and last status, with every secret redacted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
import orjson
from pydantic import ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from pipeline.settings import Settings
from pipeline.source.aio import AiohttpTransport
from pipeline.source.auth import TokenManager
from pipeline.source.clock import ClockMark
from pipeline.source.errors import (
    PlatformAuthError,
    PlatformRequestError,
    PlatformResponseError,
    RetryableFailure,
    TruncatedBody,
)
from pipeline.source.models import TokenResponse
from pipeline.source.retrying import RetryAfterOrBackoff, parse_http_date, retry_after_seconds, stop_when_spent
from pipeline.source.slots import PrioritySlots

log = logging.getLogger("lessonsync.source")

T = TypeVar("T")
Decode = Callable[[bytes], T]


@dataclass
class TransportStats:
    requests: int = 0
    retries: int = 0


# The counter of the stream run whose task sends a request: several streams share one transport (and its
# limit on requests in flight) in an overlapped sync, and each run reports its own requests. asyncio tasks
# inherit it from the task that created them (pager and pool workers from their stream's run).
STREAM_COUNTER: ContextVar[TransportStats | None] = ContextVar("lessonsync_stream_counter", default=None)


class Transport:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client = httpx.AsyncClient(
            base_url=settings.base_url.rstrip("/"),
            timeout=httpx.Timeout(settings.request_timeout),
            limits=httpx.Limits(max_connections=settings.concurrency,
                                max_keepalive_connections=settings.concurrency),
            headers={"Accept": "application/json"},
            transport=AiohttpTransport(settings.concurrency),  # aiohttp's C HTTP parser under httpx (aio.py)
        )
        self._slots = PrioritySlots(settings.concurrency)  # shared by every stream of an overlapped run
        self.auth = TokenManager(settings.app_secret, self._post_token)
        self.stats = TransportStats()
        self._server_time: datetime | None = None
        self._open_marks: list[ClockMark] = []

    def __repr__(self) -> str:
        return f"Transport(base_url={self._settings.base_url!r}, concurrency={self._settings.concurrency})"

    async def aclose(self) -> None:
        await self._client.aclose()

    def server_time(self) -> datetime:
        """The latest server time seen in a Date header; local UTC now before any response."""
        return self._server_time or datetime.now(UTC)

    def latest_server_time(self) -> datetime | None:
        """The latest Date header seen, None before any response."""
        return self._server_time

    def clock_mark(self) -> ClockMark:
        """A mark whose server_start() becomes known with the next response."""
        mark = ClockMark()
        self._open_marks.append(mark)
        return mark

    async def get(self, path: str, params: Mapping[str, str], decode: Decode[T]) -> T:
        """GET an authenticated resource and decode its body (retried when decode raises TruncatedBody)."""
        return await self._request("GET", path, params, None, decode, authenticated=True)

    async def _post_token(self, path: str, body: dict[str, str]) -> TokenResponse:
        return await self._request("POST", path, {}, body, _token_pair, authenticated=False)

    async def _request(self, method: str, path: str, params: Mapping[str, str], body: Any,
                       decode: Decode[T], *, authenticated: bool) -> T:
        retrying = AsyncRetrying(
            stop=stop_when_spent(self._settings.retry_budget, self._settings.max_attempts),
            wait=RetryAfterOrBackoff(self._settings.retry_max_wait, self._settings.retry_budget),
            retry=retry_if_exception_type(RetryableFailure),
            before_sleep=lambda state: self._note_retry(method, path, state),
            reraise=True,
        )
        attempts = 0
        started = time.monotonic()
        try:
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return await self._attempt(method, path, params, body, decode, authenticated, attempts)
        except RetryableFailure as failure:
            raise PlatformRequestError(method, path, params, failure.status, attempts,
                                       self.auth.redact(failure.detail),
                                       retried_for=time.monotonic() - started) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _note_retry(self, method: str, path: str, state: RetryCallState) -> None:
        self.stats.retries += 1
        if (own := STREAM_COUNTER.get()) is not None:
            own.retries += 1
        failure = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.info("retrying %s %s after %s (attempt %d, waiting %.2f s)", method, path,
                 self.auth.redact(str(failure)), state.attempt_number, wait)

    async def _attempt(self, method: str, path: str, params: Mapping[str, str], body: Any,
                       decode: Decode[T], authenticated: bool, attempt: int) -> T:
        if not authenticated:
            response = await self._send(method, path, params, body, None)
            return self._decoded(method, path, params, response, decode, attempt)
        async with self._slots:
            token = await self.auth.bearer()
            response = await _answered(self._send(method, path, params, body, token))
            if response.status_code == 401:
                await self.auth.on_unauthorized(token)
                response = await _answered(self._send(method, path, params, body, await self.auth.bearer()))
                if response.status_code == 401:
                    raise PlatformAuthError(
                        f"{method} {path} answered 401 to a freshly issued token; the app secret may lack "
                        "the admin scope (check LESSONSYNC_APP_SECRET)")
            return self._decoded(method, path, params, response, decode, attempt)

    async def _send(self, method: str, path: str, params: Mapping[str, str], body: Any,
                    token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        content = orjson.dumps(body) if body is not None else None
        if content is not None:
            headers = {**(headers or {}), "Content-Type": "application/json"}
        self.stats.requests += 1
        if (own := STREAM_COUNTER.get()) is not None:
            own.requests += 1
        try:
            response = await self._client.request(method, path, params=params, content=content,
                                                  headers=headers)
        except httpx.TimeoutException as exc:
            raise RetryableFailure(None, f"timed out ({type(exc).__name__})") from None
        except httpx.TransportError as exc:
            raise RetryableFailure(None, f"connection error ({type(exc).__name__}: {exc})") from None
        except httpx.DecodingError as exc:  # a compressed body that does not decompress: cut short or garbled
            raise RetryableFailure(None, f"undecodable body ({exc})") from None
        self._note_date(response.headers.get("date"))
        return response

    def _note_date(self, date: str | None) -> None:
        server_now = parse_http_date(date)
        if server_now is not None:
            if self._server_time is None or server_now > self._server_time:
                self._server_time = server_now
            received = time.monotonic()
            for mark in self._open_marks:
                mark.note(server_now, received)
            self._open_marks.clear()

    def _decoded(self, method: str, path: str, params: Mapping[str, str], response: httpx.Response,
                 decode: Decode[T], attempt: int) -> T:
        status = response.status_code
        if 200 <= status < 300:
            try:
                return decode(response.content)
            except TruncatedBody as exc:
                raise RetryableFailure(status, f"incomplete or invalid JSON body ({exc})") from None
        detail = self.auth.redact(_error_detail(response))
        if status == 429 or status >= 500:
            hint = retry_after_seconds(response.headers.get("retry-after"), self._server_time)
            raise RetryableFailure(status, f"status {status}: {detail}", retry_after=hint)
        raise PlatformRequestError(method, path, params, status, attempt, detail)


async def _answered(sending: Coroutine[Any, Any, httpx.Response]) -> httpx.Response:
    """A request once sent keeps its slot until the platform has answered it, even when its caller is
    cancelled (a pager dropping the pages it fetched ahead past the end): otherwise the connection is dropped
    while the platform still works on the request, and a new one takes the slot, so the platform would see
    more than LESSONSYNC_CONCURRENCY requests at once. The wait is bounded by the request timeout."""
    request = asyncio.ensure_future(sending)
    try:
        return await asyncio.shield(request)
    except asyncio.CancelledError:
        await asyncio.wait([request])
        if not request.cancelled():
            request.exception()  # its failure no longer matters to anyone: retrieved, so asyncio does not log it
        raise


def json_body(body: bytes) -> Any:
    """Decode for single resources: any JSON value; a body that is not complete JSON is retried."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise TruncatedBody(str(exc)) from None


def _token_pair(body: bytes) -> TokenResponse:
    try:
        return TokenResponse.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise TruncatedBody("token response is not complete JSON") from None
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors(include_input=False)})
        raise PlatformResponseError(f"the token endpoint answered without a valid token pair (fields {fields})"
                                    ) from None


def _error_detail(response: httpx.Response) -> str:
    """The DomainErrorModel's kind and message when the body is one, else the start of the body."""
    try:
        error = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return response.text[:200] or response.reason_phrase
    if isinstance(error, dict) and "message" in error:
        return f"{error.get('kind', 'error')}: {error['message']}"
    return response.text[:200]
