"""Serve an ASGI app with uvicorn on a background thread: the simulator (tests, demo), and the webhook
receiver the demo and test stack run beside it (pipeline/stack.py). The socket is bound first, so port 0
picks a free port and the URL is known before the first request. LessonSync itself never serves in a thread
(`lessonsync receive` runs uvicorn in the foreground), so this harness piece lives with the simulator."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class ThreadedServer:
    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "server", **uvicorn_options: Any
    ) -> None:
        options = {"log_level": "warning", "access_log": False, "lifespan": "off", **uvicorn_options}
        self._sock = listening_socket(host, port)
        bound_host, bound_port = self._sock.getsockname()[:2]
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.base_url = f"http://{url_host}:{bound_port}"
        self.name = name
        self._server = uvicorn.Server(uvicorn.Config(app, **options))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name=name, daemon=True
        )

    def start(self, timeout: float = 30.0) -> ThreadedServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start on {self.base_url}; see the uvicorn log above")
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=timeout)


@contextmanager
def serve_in_thread(
    app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "server", **uvicorn_options: Any
) -> Iterator[ThreadedServer]:
    server = ThreadedServer(app, host, port, name, **uvicorn_options).start()
    try:
        yield server
    finally:
        server.stop()
