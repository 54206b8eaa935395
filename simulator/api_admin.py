"""Admin routes outside /v1 for tests and demos (no auth; the simulator listens on loopback):
simulated clock, ground-truth exports (NDJSON), faults at runtime, counters, callback tokens."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response, StreamingResponse

from simulator.api_common import platform_of
from simulator.errors import DomainError, json_response
from simulator.groundtruth import RESOURCES, ground_truth, plant_invalid
from simulator.timeutil import iso

router = APIRouter(prefix="/_sim", include_in_schema=False)


def _number(name: str, text: str | None) -> float:
    if text is None:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        raise DomainError(400, f"{name}={text!r} is not a number") from None
    if value < 0:
        raise DomainError(400, f"{name}={text!r} must not be negative")
    return value


@router.post("/advance")
async def advance(request: Request, hours: str | None = None, minutes: str | None = None) -> Response:
    """Move the simulated clock forward (hours= and/or minutes=) and play that span's activity."""
    world = platform_of(request).world
    total_minutes = _number("hours", hours) * 60 + _number("minutes", minutes)
    if total_minutes <= 0:
        raise DomainError(400, "give hours= or minutes= with a positive value")
    try:
        activity = world.advance(minutes=total_minutes)
    except ValueError as exc:
        raise DomainError(400, str(exc)) from None
    return json_response({"now": iso(world.clock_ms), "activity": activity})


@router.get("/clock")
async def clock(request: Request) -> Response:
    world = platform_of(request).world
    return json_response({"now": iso(world.clock_ms), "epochMs": world.clock_ms})


@router.get("/ground-truth/{resource}")
async def export(request: Request, resource: str) -> Response:
    """Every record of a resource as NDJSON, one API record per line."""
    if resource not in RESOURCES:
        raise DomainError(404, f"unknown resource {resource!r}: choose one of {', '.join(RESOURCES)}")
    records = ground_truth(platform_of(request).world, resource)

    def lines() -> Iterator[bytes]:
        batch: list[bytes] = []
        for record in records:
            batch.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
            if len(batch) >= 1000:
                yield b"".join(batch)
                batch = []
        yield b"".join(batch)

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.post("/faults")
async def set_faults(request: Request, spec: str | None = None) -> Response:
    """Replace the active faults: ?spec=error_rate=0.05,... or a JSON body {"faults": "..."} ("" = none)."""
    platform = platform_of(request)
    if spec is None:
        body = await request.body()
        spec = str(orjson.loads(body).get("faults", "")) if body else ""
    try:
        active = platform.set_faults(spec)
    except ValueError as exc:
        raise DomainError(400, str(exc)) from None
    return json_response({"faults": str(active)})


@router.get("/counts")
async def counts(request: Request) -> Response:
    """How many records of each kind the world holds now (answers include archived and entry ones)."""
    world = platform_of(request).world
    with world.lock:
        return json_response(world.counts())


@router.get("/stats")
async def stats(request: Request) -> Response:
    return json_response(platform_of(request).stats_snapshot())


@router.get("/callback-token")
async def callback_token(request: Request, userId: str, lessonId: str) -> Response:  # noqa: N803 - API names
    try:
        token = platform_of(request).world.callback_token(userId, lessonId)
    except KeyError as exc:
        raise DomainError(404, str(exc.args[0])) from None
    return json_response({"token": token, "path": f"/v1/callbacks/update-user-lesson-status/{token}"})


@router.post("/plant-invalid")
async def plant(request: Request) -> Response:
    """JSON body {resource, field, value, touch?}: one record serves the bad value from now on."""
    body: dict[str, Any] = orjson.loads(await request.body() or b"{}")
    try:
        identity = plant_invalid(
            platform_of(request).world,
            body["resource"],
            body["field"],
            body.get("value"),
            touch=bool(body.get("touch", False)),
        )
    except (KeyError, ValueError) as exc:
        raise DomainError(400, f"plant-invalid needs resource, field and value: {exc}") from None
    return json_response(identity)
