"""httpx's API over aiohttp's connections: an httpx transport whose HTTP/1.1 is aiohttp's.

Why: pages of answers are megabytes, and httpx's own transport (httpcore + h11) handles a body as a series
of reads, each copied, extracted and joined in Python: ~7.7 ms of CPU per 1.5 MB page against ~3.0 ms
here (aiohttp parses HTTP in C with llhttp and hands the body over in one piece; docs/BENCHMARKS.md).
Everything above stays httpx: requests, responses, timeouts, error types, Content-Encoding decoding.

Errors land in httpx's hierarchy so callers keep one set of exceptions: timeouts connecting or waiting
for bytes are ConnectTimeout / ReadTimeout, a refused or lost connection ConnectError / ReadError, a
body cut short or a response that is not HTTP RemoteProtocolError. The URL is sent exactly as httpx
encoded it (percent-encoded ids stay as they are). Proxies come from the environment (HTTP(S)_PROXY,
NO_PROXY) and TLS uses httpx's context (certifi, SSL_CERT_FILE), as with httpx's own transport.

The environment is read once per origin, not per request: aiohttp's `trust_env` re-reads every variable
for the proxy and looks for a .netrc in a worker thread on each request (1,000 small requests: ~0.4 s of
CPU). Like httpx since 0.24, no .netrc credentials are sent: the platform is authenticated by its token.
"""

from __future__ import annotations

import asyncio

import aiohttp
import httpx
from yarl import URL


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session with at most `connections` keep-alive connections, opened on first use (a
    session belongs to the event loop that created it)."""

    def __init__(self, connections: int) -> None:
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[tuple[str, str, int | None], tuple[URL | None, aiohttp.BasicAuth | None]] = {}

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._connections, limit_per_host=self._connections,
                                             ssl=httpx.create_ssl_context())
            # bodies stay as sent (httpx decodes Content-Encoding); httpx already set every header it wants
            # cookies are httpx's business (it reads Set-Cookie from the response this returns)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False,
                                                  cookie_jar=aiohttp.DummyCookieJar(),
                                                  skip_auto_headers=("Accept-Encoding", "User-Agent", "Accept"))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        limits = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=limits.get("connect"), sock_read=limits.get("read"))
        url = request.url
        origin = (url.scheme, url.host, url.port)
        if origin not in self._proxies:
            self._proxies[origin] = _environment_proxy(*origin)
        proxy, proxy_auth = self._proxies[origin]
        try:
            async with self._open().request(
                request.method, URL(str(url), encoded=True), proxy=proxy, proxy_auth=proxy_auth,
                headers=[(name.decode("latin-1"), value.decode("latin-1")) for name, value in request.headers.raw],
                data=await request.aread() or None, timeout=timeout, allow_redirects=False,
            ) as response:
                body = await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out connecting", request=request) from exc
        except (aiohttp.SocketTimeoutError, asyncio.TimeoutError) as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out waiting for the response", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except aiohttp.ClientPayloadError as exc:
            raise httpx.RemoteProtocolError(f"response body incomplete ({exc})", request=request) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:  # not an HTTP response, malformed head, ...
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}", request=request) from exc
        reason = (response.reason or "").encode("ascii", errors="replace")
        return httpx.Response(response.status, headers=list(response.raw_headers), stream=httpx.ByteStream(body),
                              request=request, extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason})

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
