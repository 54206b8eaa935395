"""The lean HTTP/1.1 client (pipeline/source/wire.py) against a scripted raw HTTP server on loopback: real
sockets, responses written byte for byte (framing the simulator and uvicorn never produce: chunked with
extensions and trailers, close-delimited bodies, interim 1xx, bodies arriving in small pieces)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from pipeline.source.wire import Wire, WireError, WireTimeout

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[bool]]  # True: keep the connection


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler, self.requests, self.connections = handler, [], 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                if not await self.handler(reader, writer, head):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(handler: Handler, test: Callable[[Wire, Server], Awaitable[None]], *, timeout: float = 5.0,
        prefix: str = "") -> Server:
    async def main() -> Server:
        server = Server(handler)
        listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        wire = Wire(f"http://127.0.0.1:{port}{prefix}", timeout, 4, {"Accept": "application/json"})
        try:
            await test(wire, server)
        finally:
            await wire.aclose()
            listener.close()
        return server

    return asyncio.run(main())


def reply(body: bytes, *, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


async def pieces(writer: asyncio.StreamWriter, data: bytes, size: int) -> None:
    for start in range(0, len(data), size):
        writer.write(data[start:start + size])
        await writer.drain()
        await asyncio.sleep(0)


def test_keep_alive_target_headers_and_a_body_in_pieces():
    big = b"[" + b",".join(b'{"n": %d}' % i for i in range(60_000)) + b"]"  # ~600 KB, several reads

    async def handler(reader, writer, head):
        await pieces(writer, reply(big, extra=b"Date: Sun, 01 Nov 2026 00:00:00 GMT\r\n"), 7_001)
        return True

    async def test(wire, server):
        for _ in range(3):
            response = await wire.get("/v1/lessons/a%2Fb/answers", {"updatedSince": "2026-01-01T00:00:00+00:00",
                                                                     "pageSize": "10"}, {"Authorization": "Bearer t"})
            assert (response.status_code, bytes(response.content)) == (200, big)
            assert response.headers["date"] == "Sun, 01 Nov 2026 00:00:00 GMT"

    server = run(handler, test, prefix="/api/")
    assert server.connections == 1  # one keep-alive connection for the three requests
    first = server.requests[0].decode().split("\r\n")
    assert first[0] == ("GET /api/v1/lessons/a%2Fb/answers?updatedSince=2026-01-01T00%3A00%3A00%2B00%3A00"
                        "&pageSize=10 HTTP/1.1")
    assert {"Accept-Encoding: identity", "Authorization: Bearer t", "Accept: application/json"} <= set(first)


def test_chunked_with_extensions_and_trailers_interim_1xx_and_empty_bodies():
    bodies = iter([
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\n[1, 2\r\n3\r\n, 3\r\n1\r\n]\r\n0\r\nX-Trailer: yes\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        reply(b""),
    ])

    async def handler(reader, writer, head):
        await pieces(writer, next(bodies), 3)
        return True

    async def test(wire, server):
        assert bytes((await wire.get("/a", {}, {})).content) == b"[1, 2, 3]"
        assert bytes((await wire.get("/b", {}, {})).content) == b"[]"
        assert (await wire.get("/c", {}, {})).status_code == 204
        assert bytes((await wire.get("/d", {}, {})).content) == b""

    assert run(handler, test).connections == 1


def test_close_delimited_body_and_connection_close():
    async def handler(reader, writer, head):
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1,")
        await writer.drain()
        writer.write(b" 2]")
        return False  # the body ends with the connection

    async def test(wire, server):
        for _ in range(2):
            assert bytes((await wire.get("/a", {}, {})).content) == b"[1, 2]"

    assert run(handler, test).connections == 2


def test_an_idle_connection_closed_by_the_server_is_replaced():
    async def handler(reader, writer, head):
        writer.write(reply(b"[]"))
        await writer.drain()
        return False  # closes after answering, without saying Connection: close

    async def test(wire, server):
        for _ in range(3):
            await asyncio.sleep(0.05)  # the close reaches us first...
            assert bytes((await wire.get("/a", {}, {})).content) == b"[]"

    assert run(handler, test).connections == 3


def test_errors_truncated_body_encoded_body_garbage_and_timeout():
    script = iter([
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1, 2", False),
        (reply(b"\x1f\x8b", extra=b"Content-Encoding: gzip\r\n"), True),
        (b"SSH-2.0-OpenSSH\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[", True),  # then nothing: times out
    ])

    async def handler(reader, writer, head):
        data, keep = next(script)
        writer.write(data)
        await writer.drain()
        if keep and data.endswith(b"["):
            await asyncio.sleep(2)
        return keep

    async def test(wire, server):
        with pytest.raises(WireError, match="closed by the server before the response was complete"):
            await wire.get("/a", {}, {})
        with pytest.raises(WireError, match="encoded body"):
            await wire.get("/b", {}, {})
        with pytest.raises(WireError, match="not an HTTP/1.x response"):
            await wire.get("/c", {}, {})
        with pytest.raises(WireTimeout, match="ReadTimeout"):
            await wire.get("/d", {}, {})
        with pytest.raises(WireError, match="line break") as raised:
            await wire.get("/e", {}, {"Authorization": "Bearer x\r\nX-Forged: 1"})
        assert "Bearer" not in str(raised.value)

    run(handler, test, timeout=0.3)


def test_a_cancelled_request_closes_its_connection_and_the_next_one_works():
    async def handler(reader, writer, head):
        if b"/slow" in head:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[1")
            await writer.drain()
            await asyncio.sleep(0.5)
            return False
        writer.write(reply(b"[3]"))
        return True

    async def test(wire, server):
        task = asyncio.create_task(wire.get("/slow", {}, {}))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert bytes((await wire.get("/fast", {}, {})).content) == b"[3]"

    assert run(handler, test).connections == 2


def test_proxies_from_the_environment_leave_gets_to_httpx(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert Wire("http://platform.example", 1, 1, {}).usable
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert not Wire("http://platform.example", 1, 1, {}).usable
    monkeypatch.setenv("NO_PROXY", "platform.example")
    assert Wire("http://platform.example", 1, 1, {}).usable
