"""HTTP through aiohttp with httpx's types (PlatformHTTP, pipeline/source/transport.py) against a scripted raw HTTP server on loopback: real sockets,
responses written byte for byte (framing the simulator and uvicorn never produce: chunked with extensions
and trailers, close-delimited bodies, interim 1xx, bodies arriving in small pieces, broken responses)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable

import httpx
import pytest

from pipeline.source.paging import fill_path
from pipeline.source.transport import PlatformHTTP

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


def run(
    handler: Handler, test: Callable[[PlatformHTTP, Server], Awaitable[None]], *, timeout: float = 5.0, prefix: str = ""
) -> Server:
    async def main() -> Server:
        server = Server(handler)
        listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        client = PlatformHTTP(
            f"http://127.0.0.1:{port}{prefix}", connections=4, timeout=timeout, headers={"Accept": "application/json"}
        )
        try:
            await test(client, server)
        finally:
            await client.aclose()
            listener.close()
        return server

    return asyncio.run(main())


def reply(body: bytes, *, status: bytes = b"200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body


async def pieces(writer: asyncio.StreamWriter, data: bytes, size: int) -> None:
    for start in range(0, len(data), size):
        writer.write(data[start : start + size])
        await writer.drain()
        await asyncio.sleep(0)


def test_keep_alive_target_as_encoded_headers_and_a_body_in_pieces():
    big = b"[" + b",".join(b'{"n": %d}' % i for i in range(60_000)) + b"]"  # ~600 KB, several reads

    async def handler(reader, writer, head):
        await pieces(writer, reply(big, extra=b"Date: Sun, 01 Nov 2026 00:00:00 GMT\r\n"), 7_001)
        return True

    async def test(client, server):
        for _ in range(3):
            response = await client.request(
                "GET",
                "v1/lessons/a%2Fb%3F%23%20%C3%A9/answers",
                {"updatedSince": "2026-01-01T00:00:00+00:00", "pageSize": "10"},
                headers={"Authorization": "Bearer t"},
            )
            assert (response.status_code, response.content) == (200, big)
            assert response.headers["date"] == "Sun, 01 Nov 2026 00:00:00 GMT"

    server = run(handler, test, prefix="/api/")
    assert server.connections == 1  # one keep-alive connection for the three requests
    first = server.requests[0].decode().split("\r\n")
    # the path goes out exactly as httpx encoded it: a reserved character in an id stays escaped
    assert first[0].startswith("GET /api/v1/lessons/a%2Fb%3F%23%20%C3%A9/answers?updatedSince=2026-01-01T00")
    assert first[0].endswith("&pageSize=10 HTTP/1.1")
    assert {"authorization: bearer t", "accept: application/json"} <= {line.lower() for line in first}


def test_chunked_with_extensions_and_trailers_interim_1xx_gzip_and_empty_bodies():
    packed = gzip.compress(b'[{"a": 1}]')
    bodies = iter(
        [
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\n[1, 2\r\n3\r\n, 3\r\n1\r\n]\r\n0\r\nX-Trailer: yes\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            reply(b""),
            reply(packed, extra=b"Content-Encoding: gzip\r\n"),
        ]
    )

    async def handler(reader, writer, head):
        await pieces(writer, next(bodies), 3)
        return True

    async def test(client, server):
        assert (await client.request("GET", "/a")).content == b"[1, 2, 3]"
        assert (await client.request("GET", "/b")).content == b"[]"
        assert (await client.request("GET", "/c")).status_code == 204
        assert (await client.request("GET", "/d")).content == b""
        assert (await client.request("GET", "/e")).content == b'[{"a": 1}]'  # httpx decodes Content-Encoding

    assert run(handler, test).connections == 1


def test_close_delimited_body_and_connection_close():
    async def handler(reader, writer, head):
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1,")
        await writer.drain()
        writer.write(b" 2]")
        return False  # the body ends with the connection

    async def test(client, server):
        for _ in range(2):
            assert (await client.request("GET", "/a")).content == b"[1, 2]"

    assert run(handler, test).connections == 2


def test_errors_land_in_httpx_hierarchy_truncated_garbage_timeout_refused():
    script = iter(
        [
            (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[1, 2", False),
            (reply(b"\x1f\x8b-not-gzip", extra=b"Content-Encoding: gzip\r\n"), True),
            (b"SSH-2.0-OpenSSH\r\n\r\n", False),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n[", True),  # then nothing: times out
        ]
    )

    async def handler(reader, writer, head):
        data, keep = next(script)
        writer.write(data)
        await writer.drain()
        if keep and data.endswith(b"["):
            await asyncio.sleep(2)
        return keep

    async def test(client, server):
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete"):
            await client.request("GET", "/a")
        with pytest.raises(httpx.DecodingError):
            await client.request("GET", "/b")
        with pytest.raises(httpx.RemoteProtocolError):
            await client.request("GET", "/c")
        with pytest.raises(httpx.ReadTimeout):
            await client.request("GET", "/d")
        with pytest.raises(httpx.ConnectError):
            await PlatformHTTP("http://127.0.0.1:9", connections=1, timeout=0.3).request(
                "GET", "/refused"
            )  # discard port

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

    async def test(client, server):
        task = asyncio.create_task(client.request("GET", "/slow"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await client.request("GET", "/fast")).content == b"[3]"

    assert run(handler, test).connections == 2


def test_requests_go_through_the_environment_proxy_unless_no_proxy_names_the_host(monkeypatch):
    async def proxy(reader, writer, head):
        writer.write(reply(b'{"via": "proxy"}'))
        await writer.drain()
        return True

    async def main() -> Server:
        server = Server(proxy)
        listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("NO_PROXY", "direct.invalid")
        client = PlatformHTTP("http://platform.invalid", connections=2, timeout=5)
        direct = PlatformHTTP("http://direct.invalid", connections=2, timeout=5)
        try:
            for _ in range(2):  # the second request reuses what the first read from the environment
                assert (await client.request("GET", "/v1/groups", {"pageNumber": "1"})).json() == {"via": "proxy"}
            with pytest.raises(httpx.ConnectError):  # NO_PROXY: straight to a host that does not resolve
                await direct.request("GET", "/v1/groups")
        finally:
            await client.aclose()
            await direct.aclose()
            listener.close()
        return server

    server = asyncio.run(main())
    assert [head.split(b"\r\n")[0] for head in server.requests] == [
        b"GET http://platform.invalid/v1/groups?pageNumber=1 HTTP/1.1"
    ] * 2


@pytest.mark.parametrize(
    "base",
    [
        "http://platform.example",
        "http://platform.example/",
        "https://Platform.Example:8443/api",
        "http://127.0.0.1:8000/api/v2/",
        "http://[::1]:9/x%20y",
    ],
)
def test_addresses_are_those_httpx_would_send(base):
    """The base merged with a path and the parameters encoded exactly as httpx.AsyncClient does it, for the ids and
    values an independent platform may hand out (reserved characters, dots, spaces, non-ASCII, '+' of an offset)."""
    ids = ["plain", "a/b", "..", ".", "100%", "é ü", "a?b#c", "x+y=z&", "~-_."]
    params = [
        {},
        {"pageSize": "100", "pageNumber": "3"},
        {"updatedSince": "2026-10-31T23:49:28.968195+00:00", "search": "a b/c?&=é~", "includeArchived": "true"},
    ]
    ours = PlatformHTTP(base, connections=1, timeout=1)
    theirs = httpx.AsyncClient(base_url=base)
    for value in ids:
        for template in ("/v1/groups/{group_id}/users", "v1/users/{group_id}/lessons/{group_id}/answers"):
            path = fill_path(template, {"group_id": value})
            for query in params:
                assert ours.url(path, query) == str(theirs.build_request("GET", path, params=query).url), (path, query)


def test_a_base_address_with_a_query_is_refused():
    with pytest.raises(ValueError, match="query or fragment"):
        PlatformHTTP("http://platform.example/api?tenant=1", connections=1, timeout=1)
