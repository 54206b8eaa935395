"""Shared pieces of the route modules: the platform of a request, the bearer-token dependency, the
query parameters (declared as the spec types them, parsed by `params`) and OpenAPI response maps."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from simulator.platform import Platform
from simulator.schemas import DomainErrorModel

_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="JWT",
    scheme_name="bearerAuth",
    description="Access token from POST /v1/token (scope admin, owner claim).",
)


def platform_of(request: Request) -> Platform:
    return request.app.state.platform


async def require_admin(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None
) -> str:
    """The owner id carried by a valid access token; 401 DomainErrorModel otherwise."""
    return platform_of(request).tokens.verify(request.headers.get("authorization"))


Owner = Annotated[str, Depends(require_admin)]
_NUMBER = r"^[0-9]+$"
PageSize = Annotated[
    str,
    Query(
        alias="pageSize",
        description="1 to max page size (default 100, max 1000)",
        json_schema_extra={"pattern": r"^(1000|[1-9][0-9]{0,2})$"},
    ),
]
PageNumber = Annotated[
    str,
    Query(
        alias="pageNumber",
        description="First page: 1 unless started with --first-page 0",
        json_schema_extra={"pattern": _NUMBER},
    ),
]
UpdatedSince = Annotated[
    str,
    Query(
        alias="updatedSince",
        description="ISO 8601 with offset or Z; lastDate >= value",
        json_schema_extra={"format": "date-time"},
    ),
]
IncludeArchived = Annotated[str, Query(alias="includeArchived", json_schema_extra={"type": "boolean"})]
IncludeEntryQuiz = Annotated[str, Query(alias="includeEntryQuiz", json_schema_extra={"type": "boolean"})]
Search = Annotated[str, Query(alias="search")]
IncludeDisabled = Annotated[
    str, Query(alias="includeDisabled", description="true or false", json_schema_extra={"enum": ["true", "false"]})
]


def responses(success: Any, *errors: int, description: str = "Success") -> dict[int | str, dict[str, Any]]:
    """OpenAPI response map: the success model plus DomainErrorModel for each listed error status."""
    out: dict[int | str, dict[str, Any]] = {200: {"model": success, "description": description}}
    for status in errors:
        out[status] = {"model": DomainErrorModel, "description": _ERROR_TEXT.get(status, "Error")}
    return out


_ERROR_TEXT = {
    400: "Invalid parameters or payload",
    401: "Missing, invalid or expired access token",
    403: "Access denied",
    404: "Not found",
    500: "Internal error",
}
