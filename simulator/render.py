"""Active lessons and answers as the API spells them, built for a page of active-lesson indices.

This is the serving hot path: columns are pulled out with numpy (fancy indexing, vectorised ISO
formatting), then one plain dict per record is assembled; nested parts (results, validation) are
prepared objects shared between answers.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson

from simulator.attempts import answer_outcomes, answer_times, ragged_arange
from simulator.fixedwidth import answer_tails, supported
from simulator.newfields import NewField, add_new_fields
from simulator.rng import object_id
from simulator.store import NO_SCORE, SLOTS, SUCCEEDED
from simulator.timeutil import iso, iso_many

if TYPE_CHECKING:
    from simulator.catalog import Catalog
    from simulator.store import ActiveLessonStore


class World(Protocol):
    """What rendering reads: the live World, or a frozen snapshot of it for ground-truth exports."""

    seed: int
    owner_id: str
    store: ActiveLessonStore
    catalog: Catalog
    users: list[dict[str, Any]]
    planted_active_lessons: dict[int, dict[str, Any]]
    planted_answers: dict[tuple[int, int, int], dict[str, Any]]
    new_fields: list[tuple[NewField, int]]


KIND_ACTIVE_LESSON = 8


def active_lesson_id(seed: int, index: int) -> str:
    return object_id(seed, KIND_ACTIVE_LESSON, index)


def active_lesson_records(world: World, idx: np.ndarray) -> list[dict[str, Any]]:
    store, catalog, users = world.store, world.catalog, world.users
    lesson = store.lesson[idx]
    columns = zip(
        idx.tolist(),
        store.user[idx].tolist(),
        lesson.tolist(),
        store.progress[idx].tolist(),
        store.n_correct[idx].tolist(),
        store.n_incorrect[idx].tolist(),
        store.status[idx].tolist(),
        store.score[idx].tolist(),
        store.version[idx].tolist(),
        store.time_spent[idx].tolist(),
        iso_many(store.last_ms[idx]),
        iso_many(store.start_ms[idx]),
        catalog.threshold[lesson].tolist(),
        store.n_exit[idx].tolist(),
        strict=False,
    )
    owner, titles, lesson_ids = world.owner_id, catalog.lesson_titles, catalog.lesson_ids
    started = world.new_fields
    last_ms = store.last_ms[idx].tolist() if started else []
    records = []
    for (
        i,
        u,
        le,
        progress,
        correct,
        incorrect,
        status,
        score,
        version,
        spent,
        last,
        begun,
        threshold,
        n_exit,
    ) in columns:
        success = status == SUCCEEDED
        record: dict[str, Any] = {
            "stats": {
                "progressInPercent": progress,
                "nbIncorrectAnswers": incorrect,
                "nbCorrectAnswers": correct,
                "success": success,
                "validationThreshold": threshold,
            },
            "version": version,
            "_ownerId": owner,
            "_userId": users[u]["id"],
            "_lessonId": lesson_ids[le],
            "timeSpent": spent,
            "achieved": success,
            "lastDate": last,
            "startDate": begun,
            "title": titles[le],
        }
        if score != NO_SCORE:  # no field is required: never-scored lessons leave these out
            record["score"] = score
        if n_exit and correct + incorrect:
            record["successRate"] = round(correct / (correct + incorrect), 4)
        if started:
            add_new_fields(record, started, world.seed, i, last_ms[len(records)])
        override = world.planted_active_lessons.get(i)
        if override:
            record.update(override)
        records.append(record)
    return records


def answer_records(
    world: World, idx: np.ndarray, *, include_archived: bool, include_entry: bool, since_ms: int | None
) -> list[dict[str, Any]]:
    """The answers of `answer_page_json` as dicts (the very bytes served, decoded)."""
    return orjson.loads(
        answer_page_json(world, idx, include_archived=include_archived, include_entry=include_entry, since_ms=since_ms)
    )


def answer_page_json(
    world: World, idx: np.ndarray, *, include_archived: bool, include_entry: bool, since_ms: int | None
) -> bytes:
    """Every answer of the given active lessons, in their order (entry quiz first, then exit attempts),
    as one JSON array. Rows are spliced from pre-encoded pieces: per active lesson (ids, version), per
    question variant (ids, title, results, validation), and the row's own attempt and times."""
    store, seed = world.store, world.seed
    pages = len(idx)
    n_exit = store.n_exit[idx].astype(np.int64)
    wanted = np.zeros((pages, SLOTS), dtype=bool)
    if include_archived:
        wanted[:, 1:] = True
    else:
        wanted[np.arange(pages), n_exit] = n_exit > 0  # the current exit attempt only
    wanted[:, 0] = include_entry
    counts = np.where(wanted, store.att_n[idx].astype(np.int64), 0).ravel()
    cell = np.repeat(np.arange(pages * SLOTS), counts)
    pos, slot, q = cell // SLOTS, cell % SLOTS, ragged_arange(counts)
    al = idx[pos]
    begin, end = answer_times(store.att_start[al, slot], store.att_end[al, slot], store.att_n[al, slot], q)
    if since_ms is not None:
        keep = end >= since_ms
        pos, slot, q, al, begin, end = pos[keep], slot[keep], q[keep], al[keep], begin[keep], end[keep]
    if len(q) == 0:
        return b"[]"
    _, variant = answer_outcomes(seed, al, slot, q)
    catalog, users = world.catalog, world.users
    lessons = store.lesson[idx].tolist()
    quizzes = [(catalog.entry_questions[le], catalog.exit_questions[le]) for le in lessons]
    heads = _heads(seed, idx, lessons, store.user[idx].tolist(), store.version[idx].tolist(), catalog.lesson_ids, users)
    row_heads = [heads[p][s] for p, s in zip(pos.tolist(), slot.tolist(), strict=False)]
    fragments = [
        quizzes[p][s > 0][k].fragments[v]
        for p, s, k, v in zip(pos.tolist(), slot.tolist(), q.tolist(), variant.tolist(), strict=False)
    ]
    tails = (
        answer_tails(begin, end)
        if supported(begin, end)
        else [
            b',"lastDate":"%s","startTimeStamp":%d,"endTimeStamp":%d},' % (iso(e).encode(), b, e)
            for b, e in zip(begin.tolist(), end.tolist(), strict=False)
        ]
    )
    if world.planted_answers:
        _apply_planted(world.planted_answers, row_heads, fragments, tails, idx, pos, slot, q)
    body = b"".join(chain.from_iterable(zip(row_heads, fragments, tails, strict=False)))
    return b"[" + body[:-1] + b"]"  # rows end with "},"; drop the last comma


_ATTEMPT = [b'{"attemptIndex":0,"quizType":"entry",'] + [
    b'{"attemptIndex":%d,"quizType":"exit",' % (slot - 1) for slot in range(1, SLOTS)
]


def _heads(
    seed: int,
    idx: np.ndarray,
    lessons: list[int],
    user_numbers: list[int],
    versions: list[int],
    lesson_ids: list[str],
    users: list[dict[str, Any]],
) -> list[list[bytes]]:
    """Per active lesson and slot: `{"attemptIndex":..,"quizType":..,<ids>,"lessonVersion":..,`."""
    heads = []
    for i, le, u, v in zip(idx.tolist(), lessons, user_numbers, versions, strict=False):
        ids = (
            orjson.dumps(
                {
                    "_activeLessonId": active_lesson_id(seed, i),
                    "_lessonId": lesson_ids[le],
                    "_userId": users[u]["id"],
                    "lessonVersion": v,
                }
            )[1:-1]
            + b","
        )
        heads.append([attempt + ids for attempt in _ATTEMPT])
    return heads


def _apply_planted(
    planted: dict[tuple[int, int, int], dict[str, Any]],
    heads: list[bytes],
    fragments: list[bytes],
    tails: list[bytes],
    idx: np.ndarray,
    pos: np.ndarray,
    slot: np.ndarray,
    q: np.ndarray,
) -> None:
    """Rows planted with an invalid value (quarantine tests) are re-encoded with the override."""
    for n, key in enumerate(zip(idx[pos].tolist(), slot.tolist(), q.tolist(), strict=False)):
        override = planted.get(key)
        if override:
            row = orjson.loads(heads[n] + fragments[n] + tails[n][:-1])
            heads[n], fragments[n], tails[n] = b"", b"", orjson.dumps({**row, **override}) + b","
