"""Active lessons (4 listings), answers (3 listings) and lessons. Answer listings page on ACTIVE-LESSON
records: a page covers pageSize active lessons and flattens all their answers, so pages can be empty
mid-stream. Unknown users or lessons give empty listings (the spec lists no 404 for these). Under the
read_lag_min fault every listing leaves out the active lessons (and so their answers) stamped less than
that long ago: a replica that has not caught up (they are hidden rather than served in a previous version)."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from simulator import params
from simulator.api_common import (
    IncludeArchived,
    IncludeEntryQuiz,
    Owner,
    PageNumber,
    PageSize,
    UpdatedSince,
    platform_of,
    responses,
)
from simulator.errors import raw_json_response
from simulator.platform import Platform
from simulator.render import active_lesson_records, answer_page_json
from simulator.schemas import ActiveLesson, Answer, Lesson

router = APIRouter(prefix="/v1", tags=["progress"])
UserId = Annotated[str, Path(alias="USER_ID")]
LessonId = Annotated[str, Path(alias="LESSON_ID")]
_UNKNOWN = -1  # an id that names nothing: the listing is empty


def _resolve(platform: Platform, user_raw: str | None, lesson_raw: str | None) -> tuple[int | None, int | None]:
    world = platform.world
    user = lesson = None
    if user_raw is not None:
        found = world.directory.user_number(params.path_id("USER_ID", user_raw))
        user = _UNKNOWN if found is None else found
    if lesson_raw is not None:
        found = world.catalog.lesson_number(params.path_id("LESSON_ID", lesson_raw))
        lesson = _UNKNOWN if found is None else found
    return user, lesson


def _listing(
    platform: Platform,
    *,
    user_raw: str | None,
    lesson_raw: str | None,
    page_size: str | None,
    page_number: str | None,
    updated_since: str | None,
    answers: tuple[bool, bool] | None,
) -> Response:
    page = platform.page(page_size, page_number)
    since_ms = params.since(updated_since)
    user, lesson = _resolve(platform, user_raw, lesson_raw)
    if _UNKNOWN in (user, lesson):
        return raw_json_response(b"[]")
    world = platform.world
    with world.lock:
        platform.maybe_drift(user=user, lesson=lesson)
        chosen = world.views.select(
            user=user,
            lesson=lesson,
            since_ms=since_ms,
            n_users=len(world.users),
            n_lessons=len(world.catalog.lesson_ids),
            visible_ms=platform.visible_until(),
        )
        window = chosen[page.slice(len(chosen))]
        if answers is not None:
            return raw_json_response(
                answer_page_json(
                    world, window, include_archived=answers[0], include_entry=answers[1], since_ms=since_ms
                )
            )
        records = active_lesson_records(world, window)
    return raw_json_response(orjson.dumps(records))


def _answer_flags(include_archived: str | None, include_entry: str | None) -> tuple[bool, bool]:
    return params.flag("includeArchived", include_archived), params.flag("includeEntryQuiz", include_entry)


@router.get("/active-lessons", responses=responses(list[ActiveLesson], 400, 401))
async def list_active_lessons(
    request: Request,
    _: Owner,
    updated_since: UpdatedSince = None,
    page_size: PageSize = None,
    page_number: PageNumber = None,
) -> Response:
    """All active lessons of the owner, ordered by lastDate then insertion (or insertion only)."""
    return _listing(
        platform_of(request),
        user_raw=None,
        lesson_raw=None,
        page_size=page_size,
        page_number=page_number,
        updated_since=updated_since,
        answers=None,
    )


@router.get("/users/{USER_ID}/active-lessons", responses=responses(list[ActiveLesson], 400, 401))
async def user_active_lessons(
    request: Request, _: Owner, user_id: UserId, page_size: PageSize = None, page_number: PageNumber = None
) -> Response:
    return _listing(
        platform_of(request),
        user_raw=user_id,
        lesson_raw=None,
        page_size=page_size,
        page_number=page_number,
        updated_since=None,
        answers=None,
    )


@router.get("/lessons/{LESSON_ID}/active-lessons", responses=responses(list[ActiveLesson], 400, 401))
async def lesson_active_lessons(
    request: Request, _: Owner, lesson_id: LessonId, page_size: PageSize = None, page_number: PageNumber = None
) -> Response:
    return _listing(
        platform_of(request),
        user_raw=None,
        lesson_raw=lesson_id,
        page_size=page_size,
        page_number=page_number,
        updated_since=None,
        answers=None,
    )


@router.get("/users/{USER_ID}/lessons/{LESSON_ID}/active-lessons", responses=responses(list[ActiveLesson], 400, 401))
async def user_lesson_active_lessons(
    request: Request,
    _: Owner,
    user_id: UserId,
    lesson_id: LessonId,
    page_size: PageSize = None,
    page_number: PageNumber = None,
) -> Response:
    return _listing(
        platform_of(request),
        user_raw=user_id,
        lesson_raw=lesson_id,
        page_size=page_size,
        page_number=page_number,
        updated_since=None,
        answers=None,
    )


@router.get("/users/{USER_ID}/lessons/{LESSON_ID}/answers", responses=responses(list[Answer], 400, 401))
async def user_lesson_answers(
    request: Request,
    _: Owner,
    user_id: UserId,
    lesson_id: LessonId,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    include_archived: IncludeArchived = None,
    include_entry_quiz: IncludeEntryQuiz = None,
) -> Response:
    """Answers of one user on one lesson (no updatedSince on this operation)."""
    return _listing(
        platform_of(request),
        user_raw=user_id,
        lesson_raw=lesson_id,
        page_size=page_size,
        page_number=page_number,
        updated_since=None,
        answers=_answer_flags(include_archived, include_entry_quiz),
    )


@router.get("/lessons/{LESSON_ID}/answers", responses=responses(list[Answer], 400, 401))
async def lesson_answers(
    request: Request,
    _: Owner,
    lesson_id: LessonId,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    updated_since: UpdatedSince = None,
    include_archived: IncludeArchived = None,
    include_entry_quiz: IncludeEntryQuiz = None,
) -> Response:
    """Answers of every user on a lesson; a page covers pageSize active lessons."""
    return _listing(
        platform_of(request),
        user_raw=None,
        lesson_raw=lesson_id,
        page_size=page_size,
        page_number=page_number,
        updated_since=updated_since,
        answers=_answer_flags(include_archived, include_entry_quiz),
    )


@router.get("/users/{USER_ID}/answers", responses=responses(list[Answer], 400, 401))
async def user_answers(
    request: Request,
    _: Owner,
    user_id: UserId,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    updated_since: UpdatedSince = None,
    include_archived: IncludeArchived = None,
    include_entry_quiz: IncludeEntryQuiz = None,
) -> Response:
    """Answers of a user on every lesson; a page covers pageSize active lessons."""
    return _listing(
        platform_of(request),
        user_raw=user_id,
        lesson_raw=None,
        page_size=page_size,
        page_number=page_number,
        updated_since=updated_since,
        answers=_answer_flags(include_archived, include_entry_quiz),
    )


@router.get("/lessons", responses=responses(list[Lesson], 400, 401))
async def list_lessons(
    request: Request, _: Owner, page_size: PageSize = None, page_number: PageNumber = None
) -> Response:
    """The owner's lessons (Lesson schema; quiz questions carry an extra `id` that answers reference)."""
    platform = platform_of(request)
    page = platform.page(page_size, page_number)
    with platform.world.lock:
        lessons = platform.world.catalog.lessons
        body = orjson.dumps(lessons[page.slice(len(lessons))])
    return raw_json_response(body)
