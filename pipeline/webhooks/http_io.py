"""Small HTTP helpers for the receiver: JSON answers, content-type check, and a body read that stops at
the size limit instead of buffering whatever a client chooses to send."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response


class BodyTooLarge(Exception):
    """The body is over the configured limit; nothing beyond the limit was read."""


def header_map(request: Request) -> dict[str, str]:
    """All request headers in one pass, lower-case names; the first of repeated headers wins. Starlette's
    Headers scans the whole list per lookup, and the receiver looks up six headers per delivery."""
    headers: dict[str, str] = {}
    for name, value in request.scope["headers"]:
        headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return headers


def json_response(status: int, body: Mapping[str, object], headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(status: int, error: str, message: str, **extra: object) -> Response:
    """The receiver's error body per the spec: an `error` string and a `message` string."""
    return json_response(status, {"error": error, "message": message, **extra})


def is_json_media_type(content_type: str | None) -> bool:
    """application/json, with or without parameters (charset), or a +json structured syntax suffix."""
    if not content_type:
        return False
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


async def read_bounded_body(request: Request, headers: Mapping[str, str], max_bytes: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as the declared or streamed size passes max_bytes."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)
