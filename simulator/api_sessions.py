"""Lesson sessions: list, create, get (403 when not found, as the spec says), update, register and
unregister a user, and the sessions a user is registered to."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from simulator import params
from simulator.api_common import Owner, platform_of, responses
from simulator.errors import DomainError, raw_json_response
from simulator.platform import Platform
from simulator.schemas import LessonSession, LessonSessionBody, LessonSessionUpdateBody

router = APIRouter(prefix="/v1/lesson-session", tags=["sessions"])
SessionPath = Annotated[str, Path(alias="ID")]


def _session(platform: Platform, raw: str, name: str, missing_status: int = 404) -> dict[str, Any]:
    session_id = params.path_id(name, raw)
    record = platform.world.sessions.get(session_id)
    if record is None:
        raise DomainError(missing_status, f"lesson session {session_id!r} not found")
    return record


def _known_user(platform: Platform, raw: str) -> str:
    user_id = params.path_id("USER_ID", raw)
    if platform.world.directory.user_number(user_id) is None:
        raise DomainError(400, f"USER_ID {user_id!r} is not a user of this owner")
    return user_id


def _check_lesson(platform: Platform, lesson_id: str | None) -> None:
    if lesson_id is not None and platform.world.catalog.lesson_number(lesson_id) is None:
        raise DomainError(400, f"lessonId {lesson_id!r} is not a lesson of this owner")


def _body(record: dict[str, Any]) -> Response:
    return raw_json_response(orjson.dumps(record))


@router.get("", responses=responses(list[LessonSession], 401))
async def list_sessions(request: Request, _: Owner) -> Response:
    world = platform_of(request).world
    with world.lock:
        return raw_json_response(orjson.dumps(world.sessions.records))


@router.post("", responses=responses(LessonSession, 400, 401))
async def create_session(request: Request, _: Owner, body: LessonSessionBody) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        _check_lesson(platform, body.lesson_id)
        try:
            record = platform.world.sessions.create(body, platform.world.clock_ms)
        except ValueError as exc:
            raise DomainError(400, str(exc)) from None
        return _body(record)


@router.get("/{LESSON_ID}", responses=responses(LessonSession, 400, 401, 403))
async def get_session(request: Request, _: Owner, session_id: Annotated[str, Path(alias="LESSON_ID")]) -> Response:
    """The session with this id (the spec names the parameter LESSON_ID); 403 when it does not exist."""
    platform = platform_of(request)
    with platform.world.lock:
        return _body(_session(platform, session_id, "LESSON_ID", missing_status=403))


@router.put("/{ID}", responses=responses(LessonSession, 400, 401, 404))
async def update_session(
    request: Request, _: Owner, session_id: SessionPath, body: LessonSessionUpdateBody
) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        record = _session(platform, session_id, "ID")
        _check_lesson(platform, body.lesson_id)
        candidate = orjson.loads(orjson.dumps(record))  # validate every change before touching the record
        try:
            platform.world.sessions.update(candidate, body)
        except ValueError as exc:
            raise DomainError(400, str(exc)) from None
        record.clear()
        record.update(candidate)
        return _body(record)


@router.post("/{LESSON_SESSION_ID}/register/{USER_ID}", responses=responses(LessonSession, 400, 401, 404))
async def register(
    request: Request,
    _: Owner,
    session_id: Annotated[str, Path(alias="LESSON_SESSION_ID")],
    user_id: Annotated[str, Path(alias="USER_ID")],
) -> Response:
    """Adds the user to the session's registrations (already registered: unchanged)."""
    platform = platform_of(request)
    with platform.world.lock:
        record = _session(platform, session_id, "LESSON_SESSION_ID")
        platform.world.sessions.register(record, _known_user(platform, user_id), platform.world.clock_ms)
        return _body(record)


@router.delete("/{LESSON_SESSION_ID}/unregister/{USER_ID}", responses=responses(LessonSession, 400, 401, 404))
async def unregister(
    request: Request,
    _: Owner,
    session_id: Annotated[str, Path(alias="LESSON_SESSION_ID")],
    user_id: Annotated[str, Path(alias="USER_ID")],
) -> Response:
    """Removes the user from the session's registrations (not registered: unchanged)."""
    platform = platform_of(request)
    with platform.world.lock:
        record = _session(platform, session_id, "LESSON_SESSION_ID")
        platform.world.sessions.unregister(record, _known_user(platform, user_id))
        return _body(record)


@router.get("/{USER_ID}/registrations", responses=responses(list[LessonSession], 400, 401))
async def registrations(request: Request, _: Owner, user_id: Annotated[str, Path(alias="USER_ID")]) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        return raw_json_response(orjson.dumps(platform.world.sessions.for_user(_known_user(platform, user_id))))
