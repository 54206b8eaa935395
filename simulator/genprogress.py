"""Initial active lessons for a scale, generated vectorised (a million in seconds).

History spans HISTORY_DAYS before the simulated start. About a fifth of active lessons come from
assignment campaigns (assigned at one instant, never started) and another quarter were started but not
answered, so answer listings have long runs of active lessons without answers: empty pages mid-stream.
"""

from __future__ import annotations

import numpy as np

from simulator.attempts import correct_counts
from simulator.catalog import Catalog
from simulator.config import ScaleProfile
from simulator.directory import Directory
from simulator.names import SPECIAL_LESSON_IDS, SPECIAL_USER_IDS
from simulator.rng import generator
from simulator.store import (
    FAILED,
    IN_PROGRESS,
    MAX_EXIT,
    NO_SCORE,
    NOT_STARTED,
    PAIR_BASE,
    SUCCEEDED,
    ActiveLessonStore,
    isin,
)
from simulator.timeutil import MS_PER_DAY, MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND

HISTORY_DAYS = 180
CHUNK = 200_000  # active lessons per vectorised step, to bound temporary memory at scale large


def generate_active_lessons(
    seed: int, profile: ScaleProfile, catalog: Catalog, directory: Directory, start_ms: int
) -> ActiveLessonStore:
    rng = generator(seed, 4)
    n_users, n_lessons = len(directory.users), len(catalog.lesson_ids)
    if n_lessons >= PAIR_BASE:
        raise ValueError(f"{n_lessons} lessons exceed the simulator's limit of {PAIR_BASE - 1}")
    required = _required_pairs(catalog, directory)
    codes = _unique_pairs(rng, profile.active_lessons, n_users * n_lessons, required)
    n = len(codes)
    forced = isin(codes, required)
    campaign = (rng.random(n) < 0.2) & ~forced
    answered = forced | (~campaign & (rng.random(n) < 0.8))
    n_campaigns = int(min(8, 2 + n // 50_000))
    campaign_t = start_ms - rng.integers(5 * MS_PER_DAY, (HISTORY_DAYS - 10) * MS_PER_DAY, size=n_campaigns)
    begun = np.where(
        campaign,
        campaign_t[rng.integers(0, n_campaigns, size=n)] + rng.integers(0, 30 * MS_PER_MINUTE, size=n),
        start_ms - rng.integers(2 * MS_PER_HOUR, HISTORY_DAYS * MS_PER_DAY, size=n),
    )
    order = np.argsort(begun, kind="stable")  # insertion (key) order = start order
    codes, campaign, answered, begun = codes[order], campaign[order], answered[order], begun[order]

    store = ActiveLessonStore(int(n * 1.3))
    rows = store.append(n)
    store.user[rows] = codes // n_lessons
    store.lesson[rows] = codes % n_lessons
    store.start_ms[rows] = begun
    store.version[rows] = catalog.version[store.lesson[rows]]
    for lo in range(0, n, CHUNK):
        chunk = rows[lo : lo + CHUNK]
        _fill_attempts(seed, rng, store, catalog, chunk, answered[lo : lo + CHUNK], start_ms)
        _fill_outcome(rng, store, chunk, campaign[lo : lo + CHUNK], start_ms)
    return store


def _required_pairs(catalog: Catalog, directory: Directory) -> np.ndarray:
    """Awkward users and lessons always have answered active lessons, so their endpoints return data."""
    n_lessons = len(catalog.lesson_ids)
    specials_u = [directory.user_number(u) for u in SPECIAL_USER_IDS]
    specials_l = [catalog.lesson_number(lesson) for lesson in SPECIAL_LESSON_IDS]
    pairs = {(u, le) for u in specials_u for le in [*specials_l, 0, n_lessons - 1]}
    pairs |= {(u, le) for le in specials_l for u in range(0, min(len(directory.users), 9))}
    return np.array(sorted(u * n_lessons + le for u, le in pairs if u is not None and le is not None), dtype=np.int64)


def _unique_pairs(rng: np.random.Generator, n: int, space: int, required: np.ndarray) -> np.ndarray:
    if n > 0.9 * space:
        raise ValueError(f"{n} active lessons do not fit {space} (user, lesson) pairs: add users or lessons")
    want = n - len(required)
    if space <= 5_000_000:
        candidates = rng.permutation(space)[: n + len(required)]
    else:
        drawn = np.sort(rng.integers(0, space, size=int(n * 1.1) + 1000))
        candidates = rng.permutation(drawn[np.concatenate(([True], drawn[1:] != drawn[:-1]))])
    candidates = candidates[~isin(candidates, required)][:want]
    return np.concatenate([required, candidates]).astype(np.int64)


def _fill_attempts(
    seed: int,
    rng: np.random.Generator,
    store: ActiveLessonStore,
    catalog: Catalog,
    rows: np.ndarray,
    answered: np.ndarray,
    start_ms: int,
) -> None:
    lesson = store.lesson[rows]
    n_entry_q, n_exit_q = catalog.n_entry[lesson], catalog.n_exit[lesson]
    threshold = catalog.threshold[lesson]
    has_entry = answered & (n_entry_q > 0) & (rng.random(len(rows)) < 0.7)
    entry_start = store.start_ms[rows] + rng.integers(MS_PER_MINUTE, 30 * MS_PER_MINUTE, size=len(rows))
    entry_end = entry_start + n_entry_q * rng.integers(10, 60, size=len(rows)) * MS_PER_SECOND
    has_entry &= entry_end < start_ms - MS_PER_MINUTE
    store.att_start[rows[has_entry], 0] = entry_start[has_entry]
    store.att_end[rows[has_entry], 0] = entry_end[has_entry]
    store.att_n[rows[has_entry], 0] = n_entry_q[has_entry]

    planned = np.where(answered, rng.choice(5, size=len(rows), p=[0.03, 0.5, 0.27, 0.13, 0.07]), 0)
    planned = np.where(answered & (planned == 0) & ~has_entry, 1, planned)
    prev_end = np.where(has_entry, entry_end, store.start_ms[rows])
    alive = planned > 0
    for slot in range(1, MAX_EXIT + 1):
        begin = prev_end + rng.integers(10 * MS_PER_MINUTE, 4 * MS_PER_DAY, size=len(rows))
        end = begin + n_exit_q * rng.integers(15, 90, size=len(rows)) * MS_PER_SECOND
        ok = alive & (planned >= slot) & (end < start_ms - MS_PER_MINUTE)
        partial = ok & (planned == slot) & (n_exit_q > 1) & (rng.random(len(rows)) < 0.1)
        count = np.where(partial, rng.integers(1, np.maximum(n_exit_q, 2)), n_exit_q).astype(np.int64)
        idx = rows[ok]
        store.att_start[idx, slot] = begin[ok]
        store.att_end[idx, slot] = end[ok]
        store.att_n[idx, slot] = count[ok]
        correct = correct_counts(seed, idx, slot, count[ok])
        score = np.round(100.0 * correct / n_exit_q[ok]).astype(np.int16)
        store.n_exit[idx] = slot
        store.n_correct[idx] = correct
        store.n_incorrect[idx] = count[ok] - correct
        store.score[idx] = score
        success = (count[ok] == n_exit_q[ok]) & (score >= threshold[ok])
        store.status[idx] = np.where(success, SUCCEEDED, IN_PROGRESS)
        alive = ok.copy()
        alive[ok] = ~success
        prev_end = np.where(ok, end, prev_end)


def _fill_outcome(
    rng: np.random.Generator, store: ActiveLessonStore, rows: np.ndarray, campaign: np.ndarray, start_ms: int
) -> None:
    """Status, progress, lastDate and time spent, consistent with the attempts just made."""
    size = len(rows)
    n_exit = store.n_exit[rows]
    has_answers = store.att_n[rows].sum(axis=1) > 0
    store.score[rows[n_exit == 0]] = NO_SCORE
    succeeded = store.status[rows] == SUCCEEDED
    failed = ~succeeded & (n_exit >= 2) & (rng.random(size) < 0.5)
    status = np.where(succeeded, SUCCEEDED, np.where(failed, FAILED, IN_PROGRESS))
    status = np.where(campaign, NOT_STARTED, status)
    progress = np.where(succeeded | failed, 100, rng.integers(1, 96, size=size))
    progress = np.where(campaign, 0, progress)
    last_answer = store.att_end[rows].max(axis=1)
    quiet_end = store.start_ms[rows] + rng.integers(0, 3 * MS_PER_DAY, size=size)
    last = np.where(has_answers, last_answer + rng.integers(0, 2 * MS_PER_HOUR, size=size), quiet_end)
    last = np.where(campaign, store.start_ms[rows], last)
    store.status[rows] = status
    store.progress[rows] = progress
    store.last_ms[rows] = np.minimum(last, start_ms - MS_PER_SECOND)
    quiz_seconds = (store.att_end[rows] - store.att_start[rows]).sum(axis=1) // MS_PER_SECOND
    store.time_spent[rows] = progress * rng.integers(3, 12, size=size) + quiz_seconds
