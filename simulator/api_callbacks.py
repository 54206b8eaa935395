"""Public lesson-status callbacks. The token in the path names one active lesson: unknown -> 404,
tampered or revoked -> 403. POST sets status, progress (and score) and moves the lesson's lastDate."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from simulator import params
from simulator.api_common import platform_of, responses
from simulator.errors import DomainError, json_response
from simulator.schemas import ActiveLessonCallback, UpdateActiveLessonBody
from simulator.world import ForbiddenCallback, UnknownCallback, World

router = APIRouter(prefix="/v1/callbacks", tags=["callbacks"])
CallbackToken = Annotated[str, Path(alias="CALLBACK_TOKEN")]


def _resolve(world: World, raw: str) -> int:
    token = params.path_id("CALLBACK_TOKEN", raw)
    try:
        return world.resolve_callback(token)
    except UnknownCallback:
        raise DomainError(404, "callback token not found: use the callback address the platform gave") from None
    except ForbiddenCallback:
        raise DomainError(403, "callback token is not valid for this lesson or was revoked") from None


@router.post("/update-user-lesson-status/{CALLBACK_TOKEN}", responses=responses(ActiveLessonCallback, 400, 403, 404))
async def update_status(request: Request, token: CallbackToken, body: UpdateActiveLessonBody) -> Response:
    world = platform_of(request).world
    with world.lock:
        index = _resolve(world, token)
        return json_response(world.apply_callback(index, body.status, body.progress, body.score))


@router.get("/update-user-lesson-status/{CALLBACK_TOKEN}", responses=responses(ActiveLessonCallback, 400, 403, 404))
async def read_status(request: Request, token: CallbackToken) -> Response:
    """The same operation by GET: no body, so it reports the lesson's current status."""
    world = platform_of(request).world
    with world.lock:
        return json_response(world.callback_view(_resolve(world, token)))
