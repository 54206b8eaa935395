"""The ASGI application: FastAPI routes (their OpenAPI documents every operation with the shapes of
simulator.schemas, written from the spec) behind PlatformMiddleware. Bodies are built with orjson and
returned raw."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from simulator import api_admin, api_auth, api_callbacks, api_directory, api_progress, api_sessions
from simulator.errors import DomainError, error_response
from simulator.middleware import PlatformMiddleware
from simulator.platform import Platform

TITLE = "Learning Platform Developer API (LessonSync simulator)"


def build_app(platform: Platform) -> PlatformMiddleware:
    app = FastAPI(title=TITLE, version="1.0", docs_url="/docs", redoc_url=None)
    app.state.platform = platform
    for module in (api_auth, api_progress, api_directory, api_sessions, api_callbacks, api_admin):
        app.include_router(module.router)
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return PlatformMiddleware(app, platform)


async def _domain_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    return error_response(exc)


async def _invalid_request(_: Request, exc: Exception) -> Response:
    """FastAPI's 422 becomes the spec's 400 DomainErrorModel, naming each bad field."""
    assert isinstance(exc, RequestValidationError)
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return error_response(DomainError(400, "invalid request: " + "; ".join(problems)))


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    message = "no such operation: check the method and path" if exc.status_code in (404, 405) else str(exc.detail)
    return error_response(DomainError(exc.status_code, message), headers=getattr(exc, "headers", None))


async def _unexpected(_: Request, exc: Exception) -> Response:
    return error_response(DomainError(500, f"simulator error ({type(exc).__name__}); this is a simulator bug"))


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document without its 422 responses: this API answers 400 DomainErrorModel instead."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            routes=app.routes,
            description="Every operation of the platform API spec, served by the simulator.",
        )
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        app.openapi_schema = schema
    return app.openapi_schema
