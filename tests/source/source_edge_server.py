"""A tiny real HTTP server (Starlette on uvicorn, loopback) for the transport cases the simulator does not
script: always-429 with Retry-After: 0, exhausted 5xx, 401 on a token it just issued, refused refreshes,
opaque (non-JWT) tokens, truncated bodies. Each test scripts the responses of one path."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count

import jwt
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SECRET = "edge-app-secret-9f8e7d6c"
Script = Callable[[Request], Response | None]  # None: serve the default body


@dataclass
class EdgeState:
    token_ttl: float | None = 3600.0  # None: opaque tokens that are not JWTs
    refuse_refresh: bool = False
    reject_all_tokens: bool = False
    reject_next_tokens: int = 0  # this many tokens issued from now on are refused at once (expired in transit)
    body: list | dict = field(default_factory=list)
    script: list[Script] = field(default_factory=list)  # consumed in order, one per GET
    seen: list[Request] = field(default_factory=list)
    valid: set[str] = field(default_factory=set)
    refresh_tokens: set[str] = field(default_factory=set)
    exchanges: int = 0
    refreshes: int = 0
    _serial: Iterator[int] = field(default_factory=count)

    def issue(self) -> dict[str, str]:
        n = next(self._serial)
        if self.token_ttl is None:
            access = f"opaque-access-{n}-{time.time_ns()}"
        else:
            now = int(time.time())
            access = jwt.encode(
                {"sub": "owner", "scope": "admin", "iat": now, "exp": now + self.token_ttl, "n": n},
                "edge-signing-key-with-at-least-32-bytes",
                algorithm="HS256",
            )
        refresh = f"refresh-{n}-{time.time_ns()}"
        if self.reject_next_tokens > 0:
            self.reject_next_tokens -= 1
        else:
            self.valid.add(access)
        self.refresh_tokens.add(refresh)
        return {"access_token": access, "refresh_token": refresh}


def _app(state: EdgeState) -> Starlette:
    async def token(request: Request) -> Response:
        body = await request.json()
        if body.get("appSecret") != SECRET:
            return JSONResponse({"statusCode": 401, "kind": "unauthorized", "message": "bad secret"}, 401)
        state.exchanges += 1
        return JSONResponse(state.issue())

    async def refresh(request: Request) -> Response:
        body = await request.json()
        if state.refuse_refresh or body.get("refreshToken") not in state.refresh_tokens:
            return JSONResponse({"statusCode": 401, "kind": "unauthorized", "message": "refresh refused"}, 401)
        state.refresh_tokens.discard(body["refreshToken"])
        state.refreshes += 1
        return JSONResponse(state.issue())

    async def listing(request: Request) -> Response:
        state.seen.append(request)
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if state.reject_all_tokens or bearer not in state.valid:
            return JSONResponse({"statusCode": 401, "kind": "unauthorized", "message": "token rejected"}, 401)
        scripted = state.script.pop(0)(request) if state.script else None
        return scripted if scripted is not None else JSONResponse(state.body)

    return Starlette(
        routes=[
            Route("/v1/token", token, methods=["POST"]),
            Route("/v1/token/refresh", refresh, methods=["POST"]),
            Route("/v1/{rest:path}", listing, methods=["GET"]),
        ]
    )


@contextmanager
def edge_server(state: EdgeState) -> Iterator[str]:
    """Serves `state` on 127.0.0.1 (free port) in a thread; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(_app(state), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def status(code: int, headers: dict[str, str] | None = None) -> Script:
    return lambda _: JSONResponse(
        {"statusCode": code, "kind": "scripted", "message": f"scripted {code}"}, code, headers=headers
    )


def raw(body: bytes) -> Script:
    return lambda _: Response(body, 200, media_type="application/json")
