"""HTTP transport: one keep-alive connection pool (PlatformHTTP), explicit timeouts, a semaphore bounding requests
in flight, bearer auth with one renewal on 401, tenacity retries, server time from the Date header.

A body is decoded inside the retried attempt (a truncated body is retried like a failed request), once the
request's slot is free again, so a page waiting for a decode worker never holds back the next request. Retried:
429, 5xx, timeouts, connection errors and incomplete bodies, with exponential backoff and jitter capped by
`retry_max_wait` (a Retry-After hint honoured up to that cap, never below the backoff), until `retry_budget`
seconds have passed since the first try; the budget is also each attempt's total deadline (`RequestClock`), so a
platform that drips a body fails within it. A body over `max_response_bytes` fails at once. Every request is
counted (`stats`); errors name the method, endpoint, parameters and last status, every secret redacted.

Why aiohttp under httpx's types, the error mapping, proxies and the retry timings: docs/design.md, "HTTP".
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import cache, lru_cache
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import aiohttp
import httpx
import orjson
from pydantic import ValidationError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base
from yarl import URL

from pipeline.contract.models import TokenResponse
from pipeline.settings import ClientSettings
from pipeline.source.auth import TokenManager
from pipeline.source.errors import (
    PlatformAuthError,
    PlatformBodyTooLarge,
    PlatformRequestError,
    PlatformResponseError,
    PlatformUnavailableError,
    PlatformUnreachableError,
    RetryableFailure,
    TruncatedBody,
    with_earlier_failures,
)
from pipeline.source.slots import PrioritySlots

log = logging.getLogger("lessonsync.source")

T = TypeVar("T")
# A renewed token can still be rejected when it expires in transit (short lifetimes on a stalled machine, or
# `iat` in whole seconds making the lifetime look longer): the app secret is blamed only after this many in a row.
RENEWALS_BEFORE_REFUSAL = 3
# A body's decoder: its value, or an awaitable of it (a page decoded in a worker process, decode_workers.py)
Decode = Callable[[bytes], T | Awaitable[T]]


# Transport


@dataclass
class TransportStats:
    requests: int = 0
    retries: int = 0
    stream: str = ""  # the stream run counted here, when it is one


@dataclass(frozen=True)
class RetryingRequest:
    """A request between two tries: what the streams waiting on it wait for (pipeline/raw/runner.py says it)."""

    method: str
    path: str
    attempt: int  # tries made so far
    retry_deadline: float  # monotonic instant its retry budget ends
    stream: str  # the stream run that sent it ("" when none did)

    @property
    def is_token(self) -> bool:
        """The token exchange or refresh, which every stream of the run waits on."""
        return self.path.startswith("/v1/token")

    def budget_left(self) -> float:
        return max(0.0, self.retry_deadline - time.monotonic())


# The counter of the stream run whose task sends a request: several streams share one transport (and its
# limit on requests in flight) in an overlapped sync, and each run reports its own requests. asyncio tasks
# inherit it from the task that created them (pager and pool workers from their stream's run).
STREAM_COUNTER: ContextVar[TransportStats | None] = ContextVar("lessonsync_stream_counter", default=None)


class Transport:
    def __init__(self, settings: ClientSettings) -> None:
        self._settings = settings
        self._http = PlatformHTTP(
            settings.base_url,
            connections=settings.concurrency,
            timeout=settings.request_timeout,
            headers={"Accept": "application/json"},
            max_body=settings.max_response_bytes,
        )
        self._slots = PrioritySlots(settings.concurrency)  # shared by every stream of an overlapped run
        self.auth = TokenManager(settings.app_secret, self._post_token)
        self.stats = TransportStats()
        self._server_time: datetime | None = None
        self._open_marks: list[ClockMark] = []
        self._retrying: dict[int, RetryingRequest] = {}  # by the id of the request's clock

    def retrying(self) -> tuple[RetryingRequest, ...]:
        """The requests waiting to be tried again now (read from any thread)."""
        return tuple(self._retrying.values())

    def __repr__(self) -> str:
        return f"Transport(base_url={self._settings.base_url!r}, concurrency={self._settings.concurrency})"

    async def aclose(self) -> None:
        await self._http.aclose()

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
        """The token exchange or refresh: every stream of the run waits on it, so its failure is the run's, said in
        one line with the platform's address (auth.py hands it to every stream)."""
        try:
            return await self._request("POST", path, {}, body, _token_pair, authenticated=False)
        except PlatformUnavailableError as failure:
            raise PlatformUnreachableError(failure, address_shown(self._settings.base_url)) from None

    async def _request(
        self, method: str, path: str, params: Mapping[str, str], body: Any, decode: Decode[T], *, authenticated: bool
    ) -> T:
        clock = RequestClock(self._settings.retry_budget, self._settings.request_timeout)
        earlier: Counter[str] = Counter()  # each retried failure's detail, redacted
        retrying = AsyncRetrying(
            stop=stop_when_spent(clock, self._settings.max_attempts),
            wait=RetryAfterOrBackoff(self._settings.retry_max_wait, clock),
            retry=retry_if_exception_type(RetryableFailure),
            before_sleep=lambda state: self._note_retry(method, path, state, clock, earlier),
            reraise=True,
        )
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return await self._attempt(method, path, params, body, decode, authenticated, attempts, clock)
        except PlatformBodyTooLarge as failure:
            raise PlatformRequestError(method, path, params, failure.status, attempts, str(failure)) from None
        except RetryableFailure as failure:
            raise PlatformUnavailableError(
                method,
                path,
                params,
                failure.status,
                attempts,
                with_earlier_failures(self.auth.redact(failure.detail), earlier),
                retried_for=clock.spent(),
                reason=failure.reason,
            ) from None
        finally:
            self._retrying.pop(id(clock), None)
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _note_retry(
        self, method: str, path: str, state: RetryCallState, clock: RequestClock, earlier: Counter[str]
    ) -> None:
        """One WARNING line per retry of a request (whichever streams wait on it), with what is left of its budget;
        the failure's detail counted in `earlier`."""
        self.stats.retries += 1
        own = STREAM_COUNTER.get()
        if own is not None:
            own.retries += 1
        failure = state.outcome.exception() if state.outcome else None
        said = self.auth.redact(str(failure))
        if isinstance(failure, RetryableFailure):  # its str() is its detail
            earlier[said] += 1
        wait = state.next_action.sleep if state.next_action else 0.0
        left = max(0.0, clock.budget - clock.spent())
        self._retrying[id(clock)] = RetryingRequest(
            method, path, state.attempt_number, time.monotonic() + left, own.stream if own is not None else ""
        )
        log.warning(
            "retrying %s %s after %s (attempt %d failed, waiting %.2f s; %s of the %s retry budget left)",
            method,
            path,
            said,
            state.attempt_number,
            wait,
            duration_text(left),
            duration_text(clock.budget),
            extra={
                "event": "retry",
                "method": method,
                "path": path,
                "attempt": state.attempt_number,
                "wait_s": round(wait, 2),
                "budget_left_s": round(left, 1),
            },
        )

    async def _attempt(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        body: Any,
        decode: Decode[T],
        authenticated: bool,
        attempt: int,
        clock: RequestClock,
    ) -> T:
        if not authenticated:
            response = await self._send(method, path, params, body, None, clock)
            return await self._decoded(method, path, params, response, decode, attempt)
        async with self._slots:
            token = await self.auth.bearer()
            response = await _answered(self._send(method, path, params, body, token, clock))
            renewals = 0
            while response.status_code == 401:
                if renewals == RENEWALS_BEFORE_REFUSAL:
                    raise PlatformAuthError(
                        f"{method} {path} answered 401 to {renewals} freshly issued tokens in a row; the app "
                        "secret may lack the admin scope (check LESSONSYNC_APP_SECRET)"
                    )
                await self.auth.on_unauthorized(token)
                renewals += 1
                token = await self.auth.bearer()
                response = await _answered(self._send(method, path, params, body, token, clock))
        # decoded once the slot is free: the slot bounds requests at the platform, not our CPU (a decode that
        # waits for a worker process must not keep a request from being sent)
        return await self._decoded(method, path, params, response, decode, attempt)

    async def _send(
        self, method: str, path: str, params: Mapping[str, str], body: Any, token: str | None, clock: RequestClock
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else None
        content = orjson.dumps(body) if body is not None else None
        if content is not None:
            headers = {**(headers or {}), "Content-Type": "application/json"}
        self.stats.requests += 1
        if (own := STREAM_COUNTER.get()) is not None:
            own.requests += 1
        clock.start()
        try:
            response = await self._http.request(
                method, path, params, headers=headers, content=content, deadline=clock.attempt_deadline()
            )
        except httpx.TimeoutException as exc:
            raise RetryableFailure(None, f"timed out ({type(exc).__name__}: {exc})", reason=_why(exc)) from None
        except httpx.TransportError as exc:
            raise RetryableFailure(None, f"connection error ({type(exc).__name__}: {exc})", reason=_why(exc)) from None
        except httpx.DecodingError as exc:  # a compressed body that does not decompress: cut short or garbled
            raise RetryableFailure(None, f"undecodable body ({exc})", reason="undecodable body") from None
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

    async def _decoded(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        response: httpx.Response,
        decode: Decode[T],
        attempt: int,
    ) -> T:
        status = response.status_code
        if 200 <= status < 300:
            try:
                decoded = decode(response.content)
                return await decoded if inspect.isawaitable(decoded) else decoded
            except TruncatedBody as exc:
                raise RetryableFailure(
                    status, f"incomplete or invalid JSON body ({exc})", reason="incomplete or invalid JSON body"
                ) from None
        detail = self.auth.redact(_error_detail(response))
        if 300 <= status < 400:
            where = response.headers.get("location") or "nowhere"
            detail = self.auth.redact(
                f"redirected to {where[:200]}; redirects are not followed: set LESSONSYNC_BASE_URL to the "
                "platform's own address"
            )
        if status == 429 or status >= 500:
            hint = retry_after_seconds(response.headers.get("retry-after"), self._server_time)
            raise RetryableFailure(status, f"status {status}: {detail}", retry_after=hint)
        raise PlatformRequestError(method, path, params, status, attempt, detail)


# How long a cancelled caller's request may still take before it is dropped (see _answered): a stopped run ends
# within seconds even when the platform drips its answer.
CANCEL_GRACE_SECONDS = 2.0


async def _answered(sending: Coroutine[Any, Any, httpx.Response]) -> httpx.Response:
    """A request once sent keeps its slot until the platform has answered it, even when its caller is
    cancelled (a pager dropping the pages it fetched ahead past the end): otherwise the connection is dropped
    while the platform still works on the request, and a new one takes the slot, so the platform would see
    more than LESSONSYNC_CONCURRENCY requests at once. That wait is bounded by CANCEL_GRACE_SECONDS, after which
    the request is dropped: a stopped run must not wait for a platform that drips its answer."""
    request = asyncio.ensure_future(sending)
    try:
        return await asyncio.shield(request)
    except asyncio.CancelledError:
        await asyncio.wait([request], timeout=CANCEL_GRACE_SECONDS)
        if not request.done():
            request.cancel()
            await asyncio.wait([request])
        if not request.cancelled():
            request.exception()  # its failure no longer matters to anyone: retrieved, so asyncio does not log it
        raise


def _why(failure: httpx.TransportError) -> str:
    """A transport failure in a few words, for the one line that says the platform cannot be reached."""
    cause = failure.__cause__
    if isinstance(failure, httpx.ConnectTimeout):
        return "timed out connecting"
    if isinstance(failure, httpx.TimeoutException):
        if isinstance(cause, TimeoutError) and not isinstance(cause, aiohttp.ClientError):
            return "no complete response within the request's deadline"
        return "timed out waiting for the response"
    if isinstance(failure, httpx.ConnectError):
        os_error = getattr(cause, "os_error", None)
        if isinstance(os_error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(os_error, socket.gaierror):
            return "host name not found"
        return f"cannot connect ({getattr(os_error, 'strerror', None) or type(cause or failure).__name__})"
    if isinstance(failure, httpx.RemoteProtocolError):
        return "incomplete or malformed response"
    return "connection dropped"


def duration_text(seconds: float) -> str:
    """12 s, 4 min 30 s, 1 h 5 min: a duration as a person reads it."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.0f} s" if seconds >= 1 or seconds == 0 else f"{seconds:.1f} s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(whole // 60, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def address_shown(url: str) -> str:
    """`url` as it may appear in logs and errors: without a user name or password."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit(parts._replace(netloc=netloc))


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
        raise PlatformResponseError(
            f"the token endpoint answered without a valid token pair (fields {fields})"
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


# Retry policy

FIRST_WAIT = 0.1  # seconds before the first retry; doubles each time


def retry_after_seconds(value: str | None, server_now: datetime | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when absent/unreadable.

    An HTTP-date is compared with both our clock and the server's (its Date header), and the shorter
    delay wins: a skewed or simulated server clock must not turn "in one second" into days (the cap
    would still bound it), and a retry that comes too early is only one more bounded attempt.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delays = [(when - now).total_seconds() for now in (datetime.now(UTC), server_now) if now is not None]
    return max(0.0, min(delays))


@lru_cache(maxsize=64)  # every response carries one, and it changes once a second at most
def parse_http_date(value: str | None) -> datetime | None:
    """A Date header as an aware datetime, None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class RetryAfterOrBackoff(wait_base):
    """max(Retry-After hint, exponential backoff with jitter), never more than `cap` seconds."""

    def __init__(self, cap: float, budget: float | RequestClock | None = None) -> None:
        self._cap = cap
        self._budget = budget
        self._backoff = wait_exponential_jitter(multiplier=FIRST_WAIT, max=cap, exp_base=2, jitter=FIRST_WAIT)

    def __call__(self, retry_state: RetryCallState) -> float:
        backoff = self._backoff(retry_state)
        outcome = retry_state.outcome
        hint = getattr(outcome.exception(), "retry_after", None) if outcome is not None else None
        wait = min(self._cap, max(hint or 0.0, backoff))
        if isinstance(self._budget, RequestClock):  # never sleep past the budget: the last try comes as it ends
            wait = min(wait, self._budget.left_for_waiting())
        elif self._budget is not None:
            wait = min(wait, max(0.0, self._budget - (retry_state.seconds_since_start or 0.0)))
        return wait


class RequestClock:
    """The retry budget of one request, counted from when it is first sent (not while it waits for a slot).

    Every attempt must end by the end of the budget; the last one is given at least `reserve` seconds (5 % of
    the budget, at most one request timeout), so the whole request ends within budget + reserve."""

    def __init__(self, budget: float, request_timeout: float = float("inf")) -> None:
        self.budget = budget
        self.reserve = min(0.05 * budget, request_timeout)
        self._started: float | None = None

    def start(self) -> None:
        if self._started is None:
            self._started = time.monotonic()

    def spent(self) -> float:
        return 0.0 if self._started is None else time.monotonic() - self._started

    def left_for_waiting(self) -> float:
        """Seconds a backoff may still sleep so that the next try keeps its reserve."""
        return max(0.0, self.budget - self.reserve - self.spent())

    def attempt_deadline(self) -> float:
        """Seconds the attempt starting now may take, connect to last byte."""
        return max(self.budget - self.spent(), self.reserve)


class _BudgetSpent(stop_base):
    def __init__(self, clock: RequestClock) -> None:
        self._clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self._clock.spent() >= self._clock.budget - self._clock.reserve


def stop_when_spent(budget: float | RequestClock, max_attempts: int) -> stop_base:
    """Stop retrying once the budget is spent (seconds since the first send, or since the first try when given
    as a number), or after `max_attempts` tries."""
    spent = _BudgetSpent(budget) if isinstance(budget, RequestClock) else stop_after_delay(budget)
    return spent | stop_after_attempt(max_attempts)


# The platform's clock as its Date headers show it


class ClockMark:
    """Server time at a local instant, learnt from the first Date header that arrives after it.

    Never extrapolated forward from an older Date: the platform's clock may be simulated or stopped. It is
    one bound of the cursor rule (pipeline/raw/windows.py), never trusted alone: nothing ties the Date header
    to the clock that stamps lastDate. The Date header has whole seconds, hence -1 s.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._date: datetime | None = None
        self._received = 0.0

    def note(self, server_now: datetime, received: float) -> None:
        if self._date is None:
            self._date, self._received = server_now, received

    def server_start(self) -> datetime | None:
        if self._date is None:
            return None
        return self._date - timedelta(seconds=self._received - self.started + 1.0)


# HTTP/1.1 through aiohttp, with httpx's types


@cache
def httpx_default_headers() -> tuple[tuple[str, str], ...]:
    """The headers httpx's client sends with every request (Accept-Encoding: what httpx.Response decodes)."""
    with httpx.Client(trust_env=False, transport=httpx.MockTransport(lambda request: httpx.Response(204))) as client:
        return tuple((name.decode("latin-1"), value.decode("latin-1")) for name, value in client.headers.raw)


class PlatformHTTP:
    """Requests to one platform over at most `connections` keep-alive connections: one aiohttp session, opened on
    first use (a session belongs to the event loop that created it). `headers` go with every request, over
    httpx's defaults; `timeout` bounds connecting and each wait for bytes, a request's `deadline` the whole of it;
    a body over `max_body` bytes is refused (PlatformBodyTooLarge) before it is read whole."""

    def __init__(
        self,
        base_url: str,
        *,
        connections: int,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        max_body: int = 1 << 62,
    ) -> None:
        base = httpx.URL(base_url)  # normalised as httpx.AsyncClient(base_url=...) normalises it
        if base.query or base.fragment:
            raise ValueError(f"the platform's base address cannot carry a query or fragment: {base_url!r}")
        self._prefix = str(base).rstrip("/") + "/"  # httpx merges a path under the base's path the same way
        merged = httpx.Headers(dict(httpx_default_headers()))
        merged.update(headers or {})
        self._headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in merged.raw]
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._connections = connections
        self._max_body = max_body
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str, int | None], tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def url(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """The address of `path` (percent-encoded, relative to the base) with `params`, as httpx would send it."""
        query = urlencode(params) if params else ""
        return self._prefix + path.lstrip("/") + ("?" + query if query else "")

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=self._connections, ssl=httpx.create_ssl_context()
            )
            # bodies stay as sent (httpx.Response decodes Content-Encoding); the headers are httpx's (above)
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Accept"),
            )
        return self._session

    def _proxy(self, url: URL) -> tuple[URL | None, aiohttp.BasicAuth | None]:
        origin = (url.scheme, url.host or "", url.explicit_port)
        if origin not in self._proxies:
            self._proxies[origin] = _environment_proxy(*origin)
        return self._proxies[origin]

    async def request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        deadline: float | None = None,
    ) -> httpx.Response:
        """The response to `method` `path`, its body read and its Content-Encoding decoded, within `deadline`
        seconds (connect, headers and body; None: no total deadline)."""
        url = URL(self.url(path, params), encoded=True)
        proxy, proxy_auth = self._proxy(url)
        sent = self._headers
        if headers:  # a request's own header replaces the default of that name
            own = {name.lower() for name in headers}
            sent = [(name, value) for name, value in sent if name.lower() not in own] + list(headers.items())
        try:
            async with (
                asyncio.timeout(deadline),
                self._open().request(
                    method,
                    url,
                    proxy=proxy,
                    proxy_auth=proxy_auth,
                    headers=sent,
                    data=content,
                    timeout=self._timeout,
                    allow_redirects=False,
                ) as answer,
            ):
                body = await self._body(answer, path)
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out connecting") from exc
        except aiohttp.SocketTimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out waiting for the response") from exc
        except TimeoutError as exc:
            raise httpx.ReadTimeout(
                f"no complete response within the request's deadline ({deadline or 0:.1f} s)"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        except aiohttp.ClientPayloadError as exc:
            raise httpx.RemoteProtocolError(f"response body incomplete ({exc})") from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
        except aiohttp.ClientError as exc:  # not an HTTP response, malformed head, ...
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc
        reason = (answer.reason or "").encode("ascii", errors="replace")
        response = httpx.Response(
            answer.status,
            headers=list(answer.raw_headers),
            stream=httpx.ByteStream(body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )
        await response.aread()  # decodes Content-Encoding; httpx.DecodingError when it does not decompress
        return response

    async def _body(self, answer: aiohttp.ClientResponse, path: str) -> bytes:
        """The whole body, refused as soon as it is known to exceed max_body (announced or read so far)."""
        announced = answer.content_length
        if announced is not None and announced <= self._max_body:
            return await answer.read()
        if announced is not None:
            raise PlatformBodyTooLarge(answer.status, path, self._max_body, announced)
        chunks, size = [], 0
        async for chunk in answer.content.iter_any():
            size += len(chunk)
            if size > self._max_body:
                raise PlatformBodyTooLarge(answer.status, path, self._max_body, None)
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _environment_proxy(scheme: str, host: str, port: int | None) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy HTTP(S)_PROXY / NO_PROXY name for an origin (None: connect directly), as aiohttp's
    trust_env would find it."""
    origin = URL.build(scheme=scheme, host=host, port=port)
    try:
        return aiohttp.helpers.get_env_proxy_for_url(origin)
    except LookupError:
        return None, None
