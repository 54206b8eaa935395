"""A hostile platform for the deadline and fault tests: a small aiohttp server on loopback (free port, own thread)
that forwards every request to a real upstream (the simulator) except the endpoints given a fault, which it
answers badly: bytes dripped one a second, headers that never come, redirects, truncated, huge or invalid
bodies, HTML error pages with 200, 5xx and 429 storms, resets mid-body, pages that never end, header floods.

    with hostile_upstream(sim.base_url) as hostile:
        hostile.faults["/v1/categories"] = "drip"
        ... LESSONSYNC_BASE_URL=hostile.base_url ...

A fault applies to requests whose path starts with its key (query excluded); `hits` counts them per key. A
sequence `"header_flood*2,slow_headers"` answers the first two requests with one fault and the rest with the other.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SESSION = web.AppKey("session", aiohttp.ClientSession)


@dataclass
class Hostile:
    upstream: str
    base_url: str = ""
    faults: dict[str, str] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    first_hit: dict[str, float] = field(default_factory=dict)  # monotonic instant of each fault's first request
    other_host: str = ""  # a second server's address, for redirects to another host

    def fault_of(self, path: str) -> tuple[str, str] | None:
        for prefix, fault in self.faults.items():
            if path.startswith(prefix):
                return prefix, fault
        return None


async def _drip(request: web.Request) -> web.StreamResponse:
    """A 200 whose body arrives one byte a second: every read is quick, the body never ends in time."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = 10_000
    await response.prepare(request)
    await response.write(b"[")
    try:
        while True:
            await asyncio.sleep(1.0)
            await response.write(b" ")
    except ConnectionError:  # the client gave up: what this fault is for
        return response


async def _slow_headers(request: web.Request) -> web.StreamResponse:
    """Accepts the request and never answers."""
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def _redirect_away(request: web.Request) -> web.StreamResponse:
    hostile: Hostile = request.app[HOSTILE]
    raise web.HTTPFound(hostile.other_host + request.path_qs)


async def _redirect_loop(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(request.path_qs)


async def _truncated(request: web.Request) -> web.StreamResponse:
    """Promises 5,000 bytes of page, sends 40 and closes the connection."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = 5_000
    await response.prepare(request)
    await response.write(b'[{"_id": "c1", "name": "Cat", "descr')
    request.transport.close() if request.transport else None
    return response


async def _huge(request: web.Request) -> web.StreamResponse:
    """A 64 MiB page, streamed (chunked, no length announced)."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    chunk = b'{"_id":"x","name":"' + b"y" * 65_000 + b'"},'
    await response.write(b"[")
    for _ in range(1_000):
        await response.write(chunk)
    await response.write(b'{"_id":"z","name":"z"}]')
    return response


async def _invalid_json(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"[{'_id': 'c1', name: nope}", content_type="application/json")


async def _wrong_type(request: web.Request) -> web.StreamResponse:
    """The upstream's page, labelled text/plain."""
    status, body, _ = await _forward(request)
    return web.Response(body=body, status=status, content_type="text/plain")


async def _html_200(request: web.Request) -> web.StreamResponse:
    """A proxy's HTML error page, with status 200."""
    return web.Response(
        text="<html><body><h1>502 Bad Gateway</h1>upstream unavailable</body></html>", content_type="text/html"
    )


async def _storm_503(request: web.Request) -> web.StreamResponse:
    return web.json_response({"statusCode": 503, "kind": "unavailable", "message": "maintenance"}, status=503)


async def _absurd_429(request: web.Request) -> web.StreamResponse:
    return web.json_response(
        {"statusCode": 429, "kind": "rate_limited", "message": "slow down"},
        status=429,
        headers={"Retry-After": "999999999"},
    )


async def _reset(request: web.Request) -> web.StreamResponse:
    """Part of the body, then a TCP reset (SO_LINGER 0)."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = 5_000
    await response.prepare(request)
    await response.write(b'[{"_id": "c1"')
    if request.transport is not None:
        sock = request.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        request.transport.abort()
    return response


async def _endless(request: web.Request) -> web.StreamResponse:
    """A platform that ignores pageNumber: every page is the first one, full, so the listing never ends."""
    query = {**request.query, "pageNumber": "1", "pageSize": request.query.get("pageSize", "500")}
    status, body, headers = await _forward(request, request.path + "?" + urlencode(query))
    return web.Response(body=body, status=status, headers=headers)


async def _header_flood(request: web.Request) -> web.StreamResponse:
    """A response head of 20,000 headers (~600 KB)."""
    headers = {f"X-Flood-{i}": "z" * 20 for i in range(20_000)}
    return web.Response(body=b"[]", content_type="application/json", headers=headers)


async def _not_found(request: web.Request) -> web.StreamResponse:
    return web.json_response({"statusCode": 404, "kind": "not_found", "message": "no such thing"}, status=404)


HOSTILE = web.AppKey("hostile", Hostile)

FAULTS: dict[str, Handler] = {
    "drip": _drip,
    "slow_headers": _slow_headers,
    "redirect_away": _redirect_away,
    "redirect_loop": _redirect_loop,
    "truncated": _truncated,
    "huge": _huge,
    "invalid_json": _invalid_json,
    "wrong_type": _wrong_type,
    "html_200": _html_200,
    "storm_503": _storm_503,
    "absurd_429": _absurd_429,
    "reset": _reset,
    "endless": _endless,
    "header_flood": _header_flood,
    "not_found": _not_found,
}


def _in_turn(faults: str, hit: int) -> str:
    """The fault of the `hit`-th request (from 1) of a sequence such as "header_flood*2,slow_headers"."""
    served = 0
    for part in faults.split(","):
        name, _, times = part.partition("*")
        served += int(times) if times else hit
        if hit <= served:
            return name
    return name


_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


async def _forward(request: web.Request, path_qs: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    """The upstream's answer to `request` (to `path_qs` instead of its own path and query when given)."""
    hostile: Hostile = request.app[HOSTILE]
    session: aiohttp.ClientSession = request.app[SESSION]
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
    async with session.request(
        request.method, hostile.upstream + (path_qs or request.path_qs), headers=headers, data=await request.read()
    ) as answer:
        body = await answer.read()
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        return answer.status, body, kept


def _app(hostile: Hostile) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        fault = hostile.fault_of(request.path)
        if fault is not None:
            prefix, faults = fault
            hostile.hits[prefix] += 1
            hostile.first_hit.setdefault(prefix, time.monotonic())
            return await FAULTS[_in_turn(faults, hostile.hits[prefix])](request)
        status, body, headers = await _forward(request)
        return web.Response(body=body, status=status, headers=headers)

    async def open_session(app: web.Application) -> None:
        app[SESSION] = aiohttp.ClientSession(auto_decompress=False)

    async def close_session(app: web.Application) -> None:
        await app[SESSION].close()

    app = web.Application()
    app[HOSTILE] = hostile
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


@contextmanager
def hostile_upstream(upstream: str) -> Iterator[Hostile]:
    """A hostile server in front of `upstream` (a second one stands by as the 'other host' of redirects)."""
    hostile = Hostile(upstream=upstream.rstrip("/"))
    loop = asyncio.new_event_loop()
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await runner.setup()
        sock = _listening_socket()
        await web.SockSite(runner, sock).start()
        runners.append(runner)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    thread = threading.Thread(target=loop.run_forever, name="hostile-upstream", daemon=True)
    thread.start()
    try:
        hostile.base_url = asyncio.run_coroutine_threadsafe(start(_app(hostile)), loop).result(10)
        other = Hostile(upstream=hostile.upstream, faults={"/": "not_found"})
        hostile.other_host = asyncio.run_coroutine_threadsafe(start(_app(other)), loop).result(10)
        yield hostile
    finally:

        async def stop() -> None:
            for runner in runners:
                await runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()


def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock
