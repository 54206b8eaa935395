"""DomainErrorModel responses ({statusCode, kind, message}) and the JSON response helper."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

KINDS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    429: "too_many_requests",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
}


class DomainError(Exception):
    """An API error answered with DomainErrorModel; `message` says what was wrong and what to do."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or KINDS.get(status, "error")
        self.message = message


def error_body(status: int, message: str, kind: str | None = None) -> bytes:
    return orjson.dumps({"statusCode": status, "kind": kind or KINDS.get(status, "error"), "message": message})


def error_response(error: DomainError, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        error_body(error.status, error.message, error.kind),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


def json_response(payload: Any, status: int = 200) -> Response:
    """orjson bytes straight into a Response: no FastAPI validation of big lists at runtime."""
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def raw_json_response(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")
