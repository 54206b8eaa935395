"""A lean HTTP/1.1 client for the platform's GETs: keep-alive connections, bodies received straight into
their final buffer.

Why not httpx for these: an answers page is megabytes, and httpx/httpcore/h11 handle it as a series of
reads, each copied into h11's receive buffer, extracted (a copy), turned into bytes (a copy) and joined
by httpx at the end (a copy), with a round of anyio, httpcore and h11 plumbing in Python per read. That
was about a quarter of the client's CPU per answer row (docs/BENCHMARKS.md). Here an asyncio
BufferedProtocol lets the event loop receive the body into a buffer sized from Content-Length
(recv_into: no intermediate copy); chunked bodies and bodies delimited by the connection's end are
supported too. Everything else stays with httpx in transport.py: token requests (POST), https through a
proxy from the environment, and any base URL this module does not handle (`Wire.usable`).

Scope, on purpose: GET only; responses with Content-Encoding are never requested (Accept-Encoding:
identity) and rejected if sent anyway; no redirects (the platform's API has none; a 3xx is returned as
is and becomes an error upstream, like httpx with follow_redirects=False). Timeouts: connecting, and
inactivity while waiting for response bytes, each `timeout` seconds (httpx's connect/read timeouts).
A reused keep-alive connection that the server had closed is retried once on a fresh connection (the
request never reached the server). Errors are WireError or WireTimeout and never carry header values
(the Authorization header stays out of messages).
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.request
from collections.abc import Mapping
from urllib.parse import quote, urlencode, urlsplit

import httpx

_HEAD_LIMIT = 64 * 1024  # status line and headers of one response
_READ_SIZE = 256 * 1024  # receive size while the body length is unknown (asyncio's own read size)


class WireError(ConnectionError):
    """The connection failed or the server broke HTTP/1.1 (retryable, like httpx's TransportError)."""


class WireTimeout(WireError):
    """No connection, or no response bytes, within the timeout."""


class WireResponse:
    """What transport.py reads from a response (the subset of httpx.Response it uses)."""

    __slots__ = ("status_code", "reason_phrase", "headers", "content")

    def __init__(self, status_code: int, reason_phrase: str, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers  # lower-case names; a repeated header keeps its last value
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class _Connection(asyncio.BufferedProtocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop, self._timeout = loop, timeout
        self._transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()
        self._scratch = bytearray(_READ_SIZE)
        self.reusable = False

    def _reset(self) -> None:
        self._result: asyncio.Future[WireResponse] | None = None
        self._head = bytearray()
        self._mode = "head"  # head | length | chunked | close
        self._status: tuple[int, str, dict[str, str], bool] | None = None  # status, reason, headers, keep-alive
        self._body = bytearray()
        self._filled = 0  # "length": bytes of _body received; "chunked": bytes of _head parsed
        self._last_data = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.received_any = False

    # --- asyncio protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._mode == "length" and self._filled < len(self._body):
            return memoryview(self._body)[self._filled:]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        self._last_data = self._loop.time()
        self.received_any = True
        if self._mode == "length" and self._filled < len(self._body):
            self._filled += nbytes
            if self._filled == len(self._body):
                self._finish(bytes(self._body) if len(self._body) < 4096 else self._body)
            return
        data = memoryview(self._scratch)[:nbytes]
        if self._result is None or self._result.done():
            self._fail(WireError("the server sent bytes no request asked for"))
            return
        self._more(data)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._result is None or self._result.done():
            return
        if self._mode == "close" and self._status is not None and exc is None:
            self._finish(self._body, keep_alive=False)
            return
        what = "closed by the server" if exc is None else f"lost ({type(exc).__name__}: {exc})"
        self._result.set_exception(WireError(f"connection {what} before the response was complete"))

    # --- parsing ------------------------------------------------------------------------------------

    def _more(self, data: memoryview) -> None:
        if self._mode == "head":
            start = max(0, len(self._head) - 3)
            self._head += data
            end = self._head.find(b"\r\n\r\n", start)
            if end < 0:
                if len(self._head) > _HEAD_LIMIT:
                    self._fail(WireError("response head larger than 64 KiB"))
                return
            rest = memoryview(self._head)[end + 4:]
            try:
                self._parse_head(bytes(self._head[:end]))
            except WireError as exc:
                self._fail(exc)
                return
            leftover = bytes(rest)
            rest.release()
            self._head = bytearray()
            if self._mode == "head":  # an interim 1xx response: the real one follows
                if leftover:
                    self._more(memoryview(leftover))
                return
            if self._mode == "length":
                take = min(len(leftover), len(self._body))
                self._body[:take] = leftover[:take]
                self._filled = take
                if take < len(leftover):
                    self._fail(WireError("the server sent more bytes than its Content-Length"))
                elif self._filled == len(self._body):
                    self._finish(bytes(self._body) if len(self._body) < 4096 else self._body)
                return
            data = memoryview(leftover)
        if self._mode == "close":
            self._body += data
        elif self._mode == "chunked":
            self._head += data
            self._chunks()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].isdigit():
            raise WireError("not an HTTP/1.x response")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise WireError("malformed response header")
            headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
        if 100 <= status < 200:
            return  # interim response, mode stays "head"
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection if parts[0] == b"HTTP/1.1" else "keep-alive" in connection
        if headers.get("content-encoding", "identity").lower() != "identity":
            raise WireError("the server sent an encoded body although asked for identity")
        self._status = (status, parts[2].decode("latin-1") if len(parts) > 2 else "", headers, keep_alive)
        transfer = headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            self._mode, self._body = "length", bytearray()
            self._finish(b"")
        elif transfer:
            if transfer != "chunked":
                raise WireError(f"unsupported Transfer-Encoding {transfer!r}")
            self._mode, self._filled = "chunked", 0
        elif "content-length" in headers:
            text = headers["content-length"]
            if not text.isdigit():
                raise WireError("invalid Content-Length")
            self._mode, self._body, self._filled = "length", bytearray(int(text)), 0
            if not self._body:
                self._finish(b"")
        else:
            self._mode = "close"

    def _chunks(self) -> None:
        """Parses complete chunks of _head from position _filled into _body."""
        raw, at = self._head, self._filled
        while True:
            line_end = raw.find(b"\r\n", at)
            if line_end < 0:
                break
            size_text = bytes(raw[at:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                self._fail(WireError("malformed chunk size"))
                return
            if size == 0:  # the last chunk; trailers, if any, end with an empty line
                if raw.find(b"\r\n\r\n", line_end) >= 0:
                    self._finish(self._body)
                break
            if len(raw) < line_end + 2 + size + 2:
                break
            self._body += raw[line_end + 2:line_end + 2 + size]
            at = line_end + 2 + size + 2
        if at:
            del raw[:at]
        self._filled = 0

    # --- request life cycle -------------------------------------------------------------------------

    def _finish(self, body: bytes | bytearray, keep_alive: bool | None = None) -> None:
        assert self._status is not None and self._result is not None
        status, reason, headers, alive = self._status
        if self._timer is not None:
            self._timer.cancel()
        result = self._result
        self.reusable = alive if keep_alive is None else keep_alive
        self._mode, self._body = "done", bytearray()  # an idle connection keeps no body alive
        if not result.done():
            result.set_result(WireResponse(status, reason, headers, body))  # type: ignore[arg-type]

    def _fail(self, error: Exception) -> None:
        if self._result is not None and not self._result.done():
            self._result.set_exception(error)
        self.close()

    def _check_idle(self) -> None:
        if self._result is None or self._result.done():
            return
        waited = self._loop.time() - self._last_data
        if waited >= self._timeout:
            self._fail(WireTimeout(f"no response bytes for {self._timeout:g} s (ReadTimeout)"))
        else:
            self._timer = self._loop.call_later(self._timeout - waited, self._check_idle)

    def send(self, request: bytes) -> asyncio.Future[WireResponse]:
        self._reset()
        self.reusable = False
        self._result = self._loop.create_future()
        self._last_data = self._loop.time()
        self._timer = self._loop.call_later(self._timeout, self._check_idle)
        assert self._transport is not None
        self._transport.write(request)
        return self._result

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None:
            self._transport.close()


class Wire:
    """Keep-alive connections to one origin (at most `connections` idle ones kept) and GETs over them."""

    def __init__(self, base_url: str, timeout: float, connections: int, headers: Mapping[str, str]) -> None:
        parts = urlsplit(base_url)
        self.usable = parts.scheme in ("http", "https") and not parts.query and not parts.fragment \
            and parts.hostname is not None and not _proxied(parts.scheme, parts.hostname)
        self._scheme, self._host = parts.scheme, parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in {
            "Host": host_header, "User-Agent": "lessonsync", "Accept-Encoding": "identity", **headers}.items())
        self._timeout, self._max_idle = timeout, connections
        self._ssl: ssl.SSLContext | None = None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    def __repr__(self) -> str:
        return f"Wire({self._scheme}://{self._host}:{self._port})"

    def url(self, path: str, params: Mapping[str, str]) -> str:
        """The request target: base path + `path` (already percent-encoded) + query."""
        query = urlencode(params, quote_via=quote) if params else ""
        return f"{self._prefix}{path}{'?' if query else ''}{query}"

    async def get(self, path: str, params: Mapping[str, str], headers: Mapping[str, str]) -> WireResponse:
        target = self.url(path, params)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        if extra.count("\n") != len(headers) or extra.count("\r") != len(headers):
            raise WireError("a request header contains a line break")  # never send a forged header line
        request = f"GET {target} HTTP/1.1\r\n{self._fixed}{extra}\r\n".encode()
        connection, reused = await self._connection()
        try:
            response = await connection.send(request)
        except WireTimeout:
            raise
        except WireError:
            if not (reused and not connection.received_any):
                raise
            connection.close()  # a keep-alive connection the server had closed: once more on a new one
            self._open.discard(connection)
            connection, _ = await self._connection(fresh=True)
            response = await connection.send(request)
        finally:
            if connection._mode != "done" or not getattr(connection, "reusable", False) or connection.closed:
                connection.close()
                self._open.discard(connection)
            elif len(self._idle) < self._max_idle:
                self._idle.append(connection)
            else:
                connection.close()
                self._open.discard(connection)
        return response

    async def _connection(self, fresh: bool = False) -> tuple[_Connection, bool]:
        while self._idle and not fresh:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, True
            self._open.discard(connection)
        loop = asyncio.get_running_loop()
        if self._scheme == "https" and self._ssl is None:
            self._ssl = httpx.create_ssl_context()  # the verification httpx would do (certifi or SSL_CERT_*)
        try:
            async with asyncio.timeout(self._timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(loop, self._timeout), self._host, self._port, ssl=self._ssl,
                    server_hostname=self._host if self._ssl else None)
        except TimeoutError:
            raise WireTimeout(f"no connection within {self._timeout:g} s (ConnectTimeout)") from None
        except OSError as exc:
            raise WireError(f"cannot connect ({type(exc).__name__}: {exc.strerror or exc})") from None
        self._open.add(connection)
        return connection, False

    async def aclose(self) -> None:
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()


def _proxied(scheme: str, host: str) -> bool:
    """True when the environment routes `scheme` requests to `host` through a proxy (httpx honours it)."""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(host, proxies)
