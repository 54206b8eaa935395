"""Exports of every resource exactly as the API serves it (API field names), for tests that compare a
warehouse with the platform; and planting of one invalid value for quarantine tests.

An export is a consistent snapshot taken under the world lock when it starts: later changes (advance,
drift, callbacks) do not leak into an iteration already under way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from simulator.catalog import Catalog
from simulator.newfields import NewField
from simulator.render import active_lesson_id, active_lesson_records, answer_records
from simulator.store import ActiveLessonStore
from simulator.world import World

RESOURCES = (
    "active_lessons",
    "answers",
    "categories",
    "groups",
    "group_members",
    "users",
    "lesson_sessions",
    "lessons",
    "certificates",
)
_CHUNK = 1000


@dataclass
class _Frozen:
    """A World as rendering sees it, frozen at one instant."""

    seed: int
    owner_id: str
    store: ActiveLessonStore
    catalog: Catalog
    users: list[dict[str, Any]]
    planted_active_lessons: dict[int, dict[str, Any]]
    planted_answers: dict[tuple[int, int, int], dict[str, Any]]
    new_fields: list[tuple[NewField, int]]


def ground_truth(world: World, resource: str) -> Iterator[dict[str, Any]]:
    if resource not in RESOURCES:
        raise ValueError(f"unknown resource {resource!r}: choose one of {', '.join(RESOURCES)}")
    with world.lock:
        if resource in ("active_lessons", "answers"):
            frozen = _Frozen(
                world.seed,
                world.owner_id,
                world.store.snapshot(),
                world.catalog,
                [dict(u) for u in world.users],
                dict(world.planted_active_lessons),
                dict(world.planted_answers),
                list(world.new_fields),
            )
        else:
            records = _copy(_small_resource(world, resource))
    if resource in ("active_lessons", "answers"):
        return _progress_records(frozen, resource)
    return iter(records)


def _progress_records(frozen: _Frozen, resource: str) -> Iterator[dict[str, Any]]:
    for start in range(0, frozen.store.n, _CHUNK):
        idx = np.arange(start, min(start + _CHUNK, frozen.store.n))
        if resource == "active_lessons":
            yield from active_lesson_records(frozen, idx)
        else:
            yield from answer_records(frozen, idx, include_archived=True, include_entry=True, since_ms=None)


def _small_resource(world: World, resource: str) -> list[dict[str, Any]]:
    directory = world.directory
    if resource == "categories":
        return world.catalog.categories
    if resource == "lessons":
        return world.catalog.lessons
    if resource == "lesson_sessions":
        return world.sessions.records
    if resource == "certificates":
        return world.certificates.current()
    if resource == "groups":
        return [directory.group_record(g) for g in range(len(directory.groups))]
    members = [
        {"groupId": group["id"], **directory.users[u]}
        for group, users in zip(directory.groups, directory.members, strict=False)
        for u in users
    ]
    if resource == "group_members":
        return members
    seen: dict[str, dict[str, Any]] = {}
    for member in members:
        if member["id"] not in seen:
            seen[member["id"]] = {k: v for k, v in member.items() if k != "groupId"}
    return list(seen.values())


def _copy(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return orjson.loads(orjson.dumps(records))


def plant_invalid(
    world: World, resource: str, field: str, value: Any, *, index: int | None = None, touch: bool = False
) -> dict[str, Any]:
    """Make ONE existing record serve `field: value` from now on; returns the record's identity.

    `touch=True` also sets the owning active lesson's lastDate to now, so an incremental sync sees it.
    """
    with world.lock:
        if resource == "answers":
            return _plant_answer(world, field, value, index, touch)
        if resource == "active_lessons":
            i = world.store.n // 2 if index is None else index
            world.planted_active_lessons.setdefault(i, {})[field] = value
            _touch(world, i, touch)
            return {
                "_ownerId": world.owner_id,
                "_userId": world.users[int(world.store.user[i])]["id"],
                "_lessonId": world.catalog.lesson_ids[int(world.store.lesson[i])],
            }
        targets = {
            "groups": world.directory.groups,
            "users": world.directory.users,
            "categories": world.catalog.categories,
            "lessons": world.catalog.lessons,
            "lesson_sessions": world.sessions.records,
        }
        if resource not in targets:
            raise ValueError(
                f"cannot plant into {resource!r}: choose one of answers, active_lessons, {', '.join(targets)}"
            )
        records = targets[resource]
        record = records[len(records) // 2 if index is None else index]
        record[field] = value
        return {"id": record["id"]}


def _plant_answer(world: World, field: str, value: Any, index: int | None, touch: bool) -> dict[str, Any]:
    store = world.store
    answered = np.flatnonzero(store.column("att_n").sum(axis=1) > 0)
    i = int(answered[len(answered) // 2]) if index is None else index
    slot = int(np.flatnonzero(store.att_n[i] > 0)[0])
    world.planted_answers[(i, slot, 0)] = {field: value}
    _touch(world, i, touch)
    lesson = int(store.lesson[i])
    questions = world.catalog.entry_questions[lesson] if slot == 0 else world.catalog.exit_questions[lesson]
    return {
        "_activeLessonId": active_lesson_id(world.seed, i),
        "quizType": "entry" if slot == 0 else "exit",
        "attemptIndex": 0 if slot == 0 else slot - 1,
        "_questionId": questions[0].id,
        "_userId": world.users[int(store.user[i])]["id"],
        "_lessonId": world.catalog.lesson_ids[lesson],
    }


def _touch(world: World, i: int, touch: bool) -> None:
    if touch:
        world.store.last_ms[i] = world.clock_ms
        world.store.touched()
