"""Helpers for the simulator tests: an authenticated client, path encoding, paging, a webhook receiver."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from simulator import SimulatorHandle
from simulator.config import DEFAULT_APP_SECRET
from simulator.serving import listening_socket


def enc(value: str) -> str:
    """A path segment, percent-encoded the way every client must."""
    return quote(value, safe="")


def token_pair(base_url: str, secret: str = DEFAULT_APP_SECRET) -> dict[str, str]:
    response = httpx.post(f"{base_url}/v1/token", json={"appSecret": secret})
    assert response.status_code == 200, response.text
    return response.json()


def api_client(sim: SimulatorHandle) -> httpx.Client:
    token = token_pair(sim.base_url, sim.config.app_secret)["access_token"]
    return httpx.Client(base_url=sim.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def all_pages(
    client: httpx.Client,
    path: str,
    params: dict[str, str] | None = None,
    *,
    page_size: int = 50,
    first_page: int = 1,
    pages: int | None = None,
) -> list[list[dict[str, Any]]]:
    """Pages of a record listing until a short page (or exactly `pages` pages for answer listings)."""
    out = []
    number = first_page
    while True:
        response = client.get(path, params={**(params or {}), "pageSize": str(page_size), "pageNumber": str(number)})
        assert response.status_code == 200, response.text
        body = response.json()
        out.append(body)
        number += 1
        if (pages is None and len(body) < page_size) or (pages is not None and len(out) == pages):
            return out


def flatten(pages: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [record for page in pages for record in page]


class Receiver:
    """A real webhook receiver on loopback: records each delivery, fails the first `fail_first` ones."""

    def __init__(self, fail_first: int = 0) -> None:
        self.deliveries: list[dict[str, Any]] = []
        self.fail_first = fail_first
        self._lock = threading.Lock()
        self._seen = 0

    async def endpoint(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self._lock:
            self._seen += 1
            if self._seen <= self.fail_first:
                return JSONResponse({"error": "busy", "message": "try again"}, status_code=503)
            self.deliveries.append({"headers": dict(request.headers), "body": body})
        return JSONResponse({"received": True})


@contextmanager
def running_receiver(receiver: Receiver) -> Iterator[str]:
    app = Starlette(routes=[Route("/hooks/certificates", receiver.endpoint, methods=["POST"])])
    sock = listening_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{port}/hooks/certificates"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
