"""The hot GET listings served without FastAPI's routing and dependency machinery.

A small listing request spends most of its CPU in FastAPI and Starlette (included-router matching, dependency
solving, middleware layers), not in building the page.
These routes are the ones a sync calls thousands of times; PlatformMiddleware serves them here, calling
the SAME handler code the FastAPI routes call (api_progress._listing, api_directory._members...), after
the same checks in the same order: the bearer token first (401), then the parameters (400). FastAPI still
declares every route (OpenAPI, and every request this module does not take: other methods, other paths).

What the FastAPI routes would do and this keeps: path parameters are the raw (still percent-encoded)
segments, decoded by the handlers; a query parameter given twice counts with its last value; parameters
the route does not declare are ignored; any other exception is the spec's 500 DomainErrorModel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from starlette.datastructures import QueryParams
from starlette.responses import Response

from simulator import api_directory, api_progress
from simulator.errors import DomainError, error_response
from simulator.platform import Platform

Handler = Callable[[Platform, tuple[str, ...], QueryParams], Response]
_SEGMENT = "([^/]+)"  # Starlette's {param}: one non-empty segment


@dataclass(frozen=True)
class FastRoute:
    template: str  # the FastAPI route's path, as the request counters name it
    pattern: re.Pattern[str]
    handler: Handler


def _route(template: str, handler: Handler) -> FastRoute:
    pattern = re.sub(r"\{[^}]+\}", _SEGMENT, template)
    return FastRoute(template, re.compile(f"^{pattern}$"), handler)


def _answers(q: QueryParams) -> tuple[bool, bool]:
    return api_progress._answer_flags(q.get("includeArchived"), q.get("includeEntryQuiz"))


def _listing(by_user: bool, by_lesson: bool, *, since: bool, answers: bool) -> Handler:
    """A listing whose path holds a user id, a lesson id, both (in that order) or neither."""

    def handle(platform: Platform, path: tuple[str, ...], q: QueryParams) -> Response:
        values = iter(path)
        return api_progress._listing(
            platform,
            user_raw=next(values) if by_user else None,
            lesson_raw=next(values) if by_lesson else None,
            page_size=q.get("pageSize"),
            page_number=q.get("pageNumber"),
            updated_since=q.get("updatedSince") if since else None,
            answers=_answers(q) if answers else None,
        )

    return handle


def _group_users(platform: Platform, path: tuple[str, ...], q: QueryParams) -> Response:
    with platform.world.lock:
        return api_directory._members(
            platform,
            api_directory._group(platform, group_id=path[0]),
            q.get("pageSize"),
            q.get("pageNumber"),
            q.get("search"),
            q.get("includeDisabled"),
        )


ROUTES = (  # in the order FastAPI would try them (first match wins there too)
    _route("/v1/active-lessons", _listing(False, False, since=True, answers=False)),
    _route("/v1/users/{USER_ID}/active-lessons", _listing(True, False, since=False, answers=False)),
    _route("/v1/lessons/{LESSON_ID}/active-lessons", _listing(False, True, since=False, answers=False)),
    _route("/v1/users/{USER_ID}/lessons/{LESSON_ID}/active-lessons", _listing(True, True, since=False, answers=False)),
    _route("/v1/users/{USER_ID}/lessons/{LESSON_ID}/answers", _listing(True, True, since=False, answers=True)),
    _route("/v1/lessons/{LESSON_ID}/answers", _listing(False, True, since=True, answers=True)),
    _route("/v1/users/{USER_ID}/answers", _listing(True, False, since=True, answers=True)),
    _route("/v1/groups/{groupId}/users", _group_users),
)


def match(method: str, path: str) -> tuple[FastRoute, tuple[str, ...]] | None:
    """The fast route for a GET of `path` (raw, percent-encoded), with its path segments; None: FastAPI."""
    if method != "GET" or not path.startswith("/v1/"):
        return None
    for route in ROUTES:
        found = route.pattern.match(path)
        if found is not None:
            if route.handler is _group_users and found.group(1) == "name":
                return None  # FastAPI serves /v1/groups/name/users as GET /v1/groups/name/{uniqueName}
            return route, found.groups()
    return None


def serve(
    platform: Platform, route: FastRoute, path_values: tuple[str, ...], query_string: bytes, authorization: str | None
) -> Response:
    try:
        platform.tokens.verify(authorization)
        return route.handler(platform, path_values, QueryParams(query_string))
    except DomainError as error:
        return error_response(error)
    except Exception as error:  # what app._unexpected answers for a FastAPI route
        return error_response(DomainError(500, f"simulator error ({type(error).__name__}); this is a simulator bug"))
