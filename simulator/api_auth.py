"""Token exchange and refresh (public), logout of a platform user by id (admin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from simulator.api_common import Owner, platform_of, responses
from simulator.errors import DomainError, json_response
from simulator.schemas import ExchangeCredentialsForTokenBody, LogoutByIdBody, RefreshTokenBody, TokenResponse

router = APIRouter(prefix="/v1", tags=["auth"])


@router.post("/token", responses=responses(TokenResponse, 400, 401))
async def exchange_token(request: Request, body: ExchangeCredentialsForTokenBody) -> Response:
    """The app secret for an access token (JWT, scope admin) and a single-use refresh token."""
    return json_response(platform_of(request).tokens.exchange(body.app_secret))


@router.post("/token/refresh", responses=responses(TokenResponse, 400, 401))
async def refresh_token(request: Request, body: RefreshTokenBody) -> Response:
    """A new token pair; the refresh token given is spent (reusing it is a 401)."""
    return json_response(platform_of(request).tokens.refresh(body.refresh_token))


@router.post("/auth/logout-by-id", responses=responses(dict[str, Any], 400, 401, 404, 500))
async def logout_by_id(request: Request, _: Owner, body: LogoutByIdBody) -> Response:
    """Deletes the platform token of the user with this id (404 when no such user)."""
    world = platform_of(request).world
    with world.lock:
        if world.directory.user_number(body.id) is None:
            raise DomainError(404, f"user {body.id!r} not found")
        had_token = body.id in world.logged_in_users
        world.logged_in_users.discard(body.id)
    return json_response({"id": body.id, "loggedOut": True, "tokenDeleted": had_token})
