"""What happens on the platform while simulated time passes: about 1% of active lessons change per
simulated day (progress, new attempts and their answers, entry quizzes), new active lessons start,
the directory and sessions move, and certificates are completed and expire.

Every kind of change happens at least once per simulated day at every scale, so a one-day advance
exercises every incremental path. Randomness comes from (seed, advance number): the same calls on the
same seed give the same world.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from simulator.attempts import correct_counts
from simulator.certificates import CertificateEvent
from simulator.render import active_lesson_id
from simulator.rng import generator, pyrandom
from simulator.store import (
    FAILED,
    IN_PROGRESS,
    MAX_EXIT,
    NO_SCORE,
    NOT_STARTED,
    PAIR_BASE,
    SUCCEEDED,
    isin,
)
from simulator.timeutil import MS_PER_DAY, MS_PER_SECOND

if TYPE_CHECKING:
    from simulator.world import World

SPECIAL_GROUP = 2  # holds the awkward-id users; never loses members, never disabled


def _scaled(rng: random.Random, per_day: float, days: float) -> int:
    """floor(rate x days), plus one with the fractional remainder as probability."""
    expected = per_day * days
    whole = int(expected)
    return whole + int(rng.random() < expected - whole)


def play_activity(world: World, ms: int) -> tuple[dict[str, int], list[CertificateEvent]]:
    t0 = world.clock_ms
    rng = generator(world.seed, 7, world.advances)  # vector draws
    draw = pyrandom(world.seed, 8, world.advances)  # one-at-a-time draws
    world.advances += 1
    world.start_new_fields(t0)
    days = ms / MS_PER_DAY
    summary: Counter[str] = Counter()
    events: list[CertificateEvent] = []
    n = world.store.n
    _progress(world, rng, draw, t0, ms, _scaled(draw, max(10.0, 0.007 * n), days), summary, events)
    _new_active_lessons(world, rng, t0, ms, _scaled(draw, max(3.0, 0.003 * n), days), summary)
    _directory(world, draw, days, summary)
    _sessions(world, draw, t0, ms, days, summary)
    _awarded(world, rng, draw, t0, ms, _scaled(draw, max(1.0, 0.0005 * n), days), summary, events)
    world.clock_ms = t0 + ms
    expired = world.certificates.expire_due(world.clock_ms)
    summary["certificates_expired"] += len(expired)
    world.store.touched()
    return dict(summary), sorted(events + expired, key=lambda e: e.at_ms)


def _progress(
    world: World,
    rng: np.random.Generator,
    draw: random.Random,
    t0: int,
    ms: int,
    count: int,
    summary: Counter[str],
    events: list[CertificateEvent],
) -> None:
    store, catalog = world.store, world.catalog
    if count == 0 or store.n == 0:
        return
    chosen = rng.choice(store.n, size=min(count, store.n), replace=False)
    times = np.sort(t0 + rng.integers(1, ms + 1, size=len(chosen)))
    for i, t in zip(chosen.tolist(), times.tolist(), strict=False):
        lesson = int(store.lesson[i])
        status = int(store.status[i])
        roll = draw.random()
        if status in (SUCCEEDED, FAILED):
            summary["revisits"] += 1
        elif roll < 0.45 and store.n_exit[i] < MAX_EXIT:
            _exit_attempt(world, draw, i, lesson, t0, t, summary, events)
        elif roll < 0.6 and store.att_n[i, 0] == 0 and store.n_exit[i] == 0 and catalog.entry_questions[lesson]:
            _entry_attempt(world, draw, i, lesson, t0, t)
            summary["entry_quizzes"] += 1
        else:
            store.progress[i] = min(99, int(store.progress[i]) + draw.randrange(5, 30))
            store.status[i] = IN_PROGRESS
            summary["progress_updates"] += 1
        store.last_ms[i] = t
        store.time_spent[i] += draw.randrange(30, 900)
        world.users[int(store.user[i])]["points"] += draw.randrange(5, 50)


def _attempt_span(rng: random.Random, questions: int, t0: int, t: int) -> int:
    """Start of an attempt ending at t: after the previous clock reading, so every answer is new."""
    return max(t0 + 1, t - questions * rng.randrange(15, 90) * MS_PER_SECOND)


def _entry_attempt(world: World, rng: random.Random, i: int, lesson: int, t0: int, t: int) -> None:
    store = world.store
    questions = len(world.catalog.entry_questions[lesson])
    store.att_start[i, 0] = _attempt_span(rng, questions, t0, t)
    store.att_end[i, 0] = t
    store.att_n[i, 0] = questions
    if store.status[i] == NOT_STARTED:
        store.status[i] = IN_PROGRESS


def _exit_attempt(
    world: World,
    rng: random.Random,
    i: int,
    lesson: int,
    t0: int,
    t: int,
    summary: Counter[str],
    events: list[CertificateEvent],
) -> None:
    store, catalog = world.store, world.catalog
    slot = int(store.n_exit[i]) + 1
    questions = len(catalog.exit_questions[lesson])
    answered = questions if questions < 2 or rng.random() >= 0.1 else rng.randrange(1, questions)
    store.att_start[i, slot] = _attempt_span(rng, answered, t0, t)
    store.att_end[i, slot] = t
    store.att_n[i, slot] = answered
    correct = int(correct_counts(world.seed, np.array([i]), slot, np.array([answered]))[0])
    score = round(100 * correct / questions)
    success = answered == questions and score >= int(catalog.threshold[lesson])
    store.n_exit[i] = slot
    store.n_correct[i], store.n_incorrect[i], store.score[i] = correct, answered - correct, score
    if success:
        store.status[i], store.progress[i] = SUCCEEDED, 100
    elif slot == MAX_EXIT and answered == questions:
        store.status[i], store.progress[i] = FAILED, 100
    else:
        store.status[i], store.progress[i] = IN_PROGRESS, max(90, int(store.progress[i]))
    summary["new_attempts"] += 1
    summary["new_answers"] += answered
    badge = catalog.badge_ids[lesson]
    user_id = world.users[int(store.user[i])]["id"]
    if success and badge is not None and not world.certificates.holds(user_id, badge):
        events.append(
            world.certificates.complete(
                rng,
                user_id=user_id,
                badge_id=badge,
                badge_name=catalog.lesson_titles[lesson],
                active_lesson_ids=[active_lesson_id(world.seed, i)],
                at_ms=t,
            )
        )
        summary["certificates_completed"] += 1


def _new_active_lessons(
    world: World, rng: np.random.Generator, t0: int, ms: int, count: int, summary: Counter[str]
) -> None:
    store, catalog = world.store, world.catalog
    n_users, n_lessons = len(world.users), len(catalog.lesson_ids)
    if count == 0:
        return
    codes = rng.integers(0, n_users, size=count * 4).astype(np.int64) * PAIR_BASE + rng.integers(
        0, n_lessons, size=count * 4
    )
    codes = codes[~isin(codes, store.pair_codes())]
    _, first = np.unique(codes, return_index=True)
    codes = codes[np.sort(first)][:count]
    times = np.sort(t0 + rng.integers(1, ms + 1, size=len(codes)))
    rows = store.append(len(codes))
    store.user[rows] = codes // PAIR_BASE
    store.lesson[rows] = codes % PAIR_BASE
    store.start_ms[rows] = times
    store.last_ms[rows] = times
    store.version[rows] = catalog.version[store.lesson[rows]]
    store.score[rows] = NO_SCORE
    store.progress[rows] = rng.integers(0, 20, size=len(rows))
    store.status[rows] = np.where(store.progress[rows] == 0, NOT_STARTED, IN_PROGRESS)
    store.time_spent[rows] = store.progress[rows].astype(np.int32) * 9
    summary["new_active_lessons"] += len(rows)


def _directory(world: World, rng: random.Random, days: float, summary: Counter[str]) -> None:
    directory = world.directory
    n_groups = len(directory.groups)
    enabled = [g for g in range(n_groups) if not directory.groups[g]["disabled"] and g != SPECIAL_GROUP]
    for _ in range(_scaled(rng, max(1.0, 0.002 * len(world.users)), days)):
        u = directory.add_user(rng)
        for g in rng.sample(enabled, min(len(enabled), rng.randrange(1, 3))):
            directory.add_member(g, u)
        summary["new_users"] += 1
    for _ in range(_scaled(rng, max(1.0, 0.003 * len(world.users)), days)):
        if directory.add_member(rng.randrange(n_groups), rng.randrange(len(world.users))):
            summary["new_memberships"] += 1
    for _ in range(_scaled(rng, max(1.0, 0.001 * len(world.users)), days)):
        g = rng.choice(enabled)
        if len(directory.members[g]) > 1:
            directory.remove_member(g, rng.choice(directory.members[g]))
            summary["vanished_members"] += 1
    for _ in range(_scaled(rng, max(1.0, 0.01 * n_groups), days)):
        g = rng.randrange(n_groups)
        directory.rename_group(g, directory.groups[g]["title"].split(" · ")[0] + f" · {world.advances}")
        summary["renamed_groups"] += 1
    for _ in range(_scaled(rng, 1.0, days)):
        disabled = [g for g in range(n_groups) if directory.groups[g]["disabled"]]
        if rng.random() < 0.7 and len(enabled) > n_groups // 2:
            g = rng.choice(enabled)
            directory.set_disabled(g, True)
            enabled.remove(g)
            summary["disabled_groups"] += 1
        elif disabled:
            directory.set_disabled(rng.choice(disabled), False)
            summary["enabled_groups"] += 1


def _sessions(world: World, rng: random.Random, t0: int, ms: int, days: float, summary: Counter[str]) -> None:
    sessions, user_ids = world.sessions, world.user_ids()
    for _ in range(_scaled(rng, max(1.0, 0.02 * len(sessions.records)), days)):
        sessions.generate(rng, t0 + rng.randrange(1, ms + 1), world.catalog.lesson_ids, user_ids)
        summary["new_sessions"] += 1
    for _ in range(_scaled(rng, max(2.0, 0.05 * len(sessions.records)), days)):
        record = rng.choice(sessions.records)
        if sessions.register(record, rng.choice(user_ids), t0 + rng.randrange(1, ms + 1)):
            summary["new_registrations"] += 1


def _awarded(
    world: World,
    rng: np.random.Generator,
    draw: random.Random,
    t0: int,
    ms: int,
    count: int,
    summary: Counter[str],
    events: list[CertificateEvent],
) -> None:
    """Badges earned for past successes (a track completed, a rule re-evaluated): at least one a day."""
    store, catalog = world.store, world.catalog
    succeeded = np.flatnonzero(store.column("status") == SUCCEEDED)
    if len(succeeded) == 0:
        return
    for _ in range(count):
        for i in (int(succeeded[k]) for k in draw.sample(range(len(succeeded)), min(20, len(succeeded)))):
            lesson = int(store.lesson[i])
            badge = catalog.badge_ids[lesson]
            user_id = world.users[int(store.user[i])]["id"]
            if badge is None or world.certificates.holds(user_id, badge):
                continue
            events.append(
                world.certificates.complete(
                    draw,
                    user_id=user_id,
                    badge_id=badge,
                    badge_name=catalog.lesson_titles[lesson],
                    active_lesson_ids=[active_lesson_id(world.seed, i)],
                    at_ms=t0 + draw.randrange(1, ms + 1),
                )
            )
            summary["certificates_completed"] += 1
            break
