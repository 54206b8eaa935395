"""Categories, groups (search, includeDisabled), one group by id or unique name, users of a group.
includeDisabled=true lists disabled groups and deactivated users; without it they are left out."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from simulator import params
from simulator.api_common import (
    IncludeDisabled,
    Owner,
    PageNumber,
    PageSize,
    Search,
    platform_of,
    responses,
)
from simulator.errors import DomainError, raw_json_response
from simulator.platform import Platform
from simulator.schemas import Category, User, UserGroup

router = APIRouter(prefix="/v1", tags=["directory"])
GroupId = Annotated[str, Path(alias="groupId")]
UniqueName = Annotated[str, Path(alias="uniqueName")]


@router.get("/categories", responses=responses(list[Category], 401))
async def list_categories(request: Request, _: Owner) -> Response:
    world = platform_of(request).world
    with world.lock:
        return raw_json_response(orjson.dumps(world.catalog.categories))


@router.get("/groups", responses=responses(list[UserGroup], 400, 401))
async def list_groups(
    request: Request,
    _: Owner,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    search: Search = None,
    include_disabled: IncludeDisabled = None,
) -> Response:
    platform = platform_of(request)
    page = platform.page(page_size, page_number)
    include = params.flag("includeDisabled", include_disabled)
    directory = platform.world.directory
    with platform.world.lock:
        chosen = directory.visible_groups(include, search)
        body = orjson.dumps([directory.group_record(g) for g in chosen[page.slice(len(chosen))]])
    return raw_json_response(body)


def _group(platform: Platform, *, group_id: str | None = None, unique_name: str | None = None) -> int:
    directory = platform.world.directory
    if group_id is not None:
        value = params.path_id("groupId", group_id)
        found, label = directory.group_number(value), f"group id {value!r}"
    else:
        value = params.path_id("uniqueName", unique_name or "")
        found, label = directory.group_by_unique_name(value), f"group unique name {value!r}"
    if found is None:
        raise DomainError(404, f"{label} is not a group of this owner")
    return found


def _members(
    platform: Platform,
    g: int,
    page_size: str | None,
    page_number: str | None,
    search: str | None,
    include_disabled: str | None,
) -> Response:
    page = platform.page(page_size, page_number)
    include = params.flag("includeDisabled", include_disabled)
    directory = platform.world.directory
    members = directory.visible_members(g, include, search)
    return raw_json_response(orjson.dumps([directory.users[u] for u in members[page.slice(len(members))]]))


@router.get("/groups/name/{uniqueName}/users", responses=responses(list[User], 400, 401, 404))
async def group_users_by_name(
    request: Request,
    _: Owner,
    unique_name: UniqueName,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    search: Search = None,
    include_disabled: IncludeDisabled = None,
) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        return _members(
            platform, _group(platform, unique_name=unique_name), page_size, page_number, search, include_disabled
        )


@router.get("/groups/name/{uniqueName}", responses=responses(UserGroup, 400, 401, 404))
async def group_by_name(request: Request, _: Owner, unique_name: UniqueName) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        g = _group(platform, unique_name=unique_name)
        return raw_json_response(orjson.dumps(platform.world.directory.group_record(g)))


@router.get("/groups/{groupId}/users", responses=responses(list[User], 400, 401, 404))
async def group_users(
    request: Request,
    _: Owner,
    group_id: GroupId,
    page_size: PageSize = None,
    page_number: PageNumber = None,
    search: Search = None,
    include_disabled: IncludeDisabled = None,
) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        return _members(platform, _group(platform, group_id=group_id), page_size, page_number, search, include_disabled)


@router.get("/groups/{groupId}", responses=responses(UserGroup, 400, 401, 404))
async def group_by_id(request: Request, _: Owner, group_id: GroupId) -> Response:
    platform = platform_of(request)
    with platform.world.lock:
        g = _group(platform, group_id=group_id)
        return raw_json_response(orjson.dumps(platform.world.directory.group_record(g)))
