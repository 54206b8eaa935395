"""Active lessons, kept columnar (numpy) so a million of them fit in a few hundred MB and pages are
sliced, filtered and sorted without a Python object per record.

Attempt slots: slot 0 is the entry-quiz attempt, slots 1..MAX_EXIT the exit-quiz attempts (attemptIndex =
slot - 1). A slot with att_n == 0 holds no answers. Answers themselves are never stored: they are derived
from (seed, active lesson, slot, question) and the slot's times (see answers.py).
"""

from __future__ import annotations

import numpy as np

MAX_EXIT = 4
SLOTS = 1 + MAX_EXIT
STATUSES = ("not-started", "in-progress", "succeeded", "failed")
NOT_STARTED, IN_PROGRESS, SUCCEEDED, FAILED = range(4)
NO_SCORE = -1
PAIR_BASE = 1 << 22  # (user, lesson) -> user * PAIR_BASE + lesson; lesson numbers stay below this

_COLUMNS: dict[str, tuple[type, tuple[int, ...]]] = {
    "user": (np.int32, ()),
    "lesson": (np.int32, ()),
    "start_ms": (np.int64, ()),
    "last_ms": (np.int64, ()),
    "progress": (np.int16, ()),
    "time_spent": (np.int32, ()),  # seconds
    "status": (np.int8, ()),
    "score": (np.int16, ()),  # NO_SCORE until an exit attempt or a callback sets one
    "n_correct": (np.int16, ()),  # of the current exit attempt
    "n_incorrect": (np.int16, ()),
    "version": (np.int16, ()),
    "n_exit": (np.int8, ()),  # exit attempts made; the current one is slot n_exit
    "att_start": (np.int64, (SLOTS,)),
    "att_end": (np.int64, (SLOTS,)),
    "att_n": (np.int8, (SLOTS,)),  # answers given in the slot's attempt
}


class ActiveLessonStore:
    """Growable columns; `mutations` counts changes so derived orders can be cached safely."""

    def __init__(self, capacity: int) -> None:
        self.n = 0
        self.mutations = 0
        self._capacity = 0
        for name, (dtype, shape) in _COLUMNS.items():
            setattr(self, name, np.zeros((0, *shape), dtype=dtype))
        self._grow(max(16, capacity))

    def _grow(self, capacity: int) -> None:
        for name, (dtype, shape) in _COLUMNS.items():
            old = getattr(self, name)
            new = np.zeros((capacity, *shape), dtype=dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)
        self._capacity = capacity

    def append(self, count: int) -> np.ndarray:
        """Reserve `count` new rows (zeroed) and return their indices; the caller fills the columns."""
        if self.n + count > self._capacity:
            self._grow(max(self.n + count, int(self._capacity * 1.25) + 16))
        rows = np.arange(self.n, self.n + count)
        self.n += count
        self.mutations += 1
        return rows

    def touched(self) -> None:
        self.mutations += 1

    def column(self, name: str) -> np.ndarray:
        """The live part of a column (a view, not a copy)."""
        return getattr(self, name)[: self.n]

    def pair_codes(self) -> np.ndarray:
        return self.column("user").astype(np.int64) * PAIR_BASE + self.column("lesson")

    def snapshot(self) -> ActiveLessonStore:
        """An independent copy of the live rows (for ground-truth exports while the server keeps going)."""
        copy = ActiveLessonStore(self.n)
        copy.n = self.n
        copy.mutations = self.mutations
        for name in _COLUMNS:
            getattr(copy, name)[: self.n] = self.column(name)
        return copy


def isin(values: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """np.isin by sort + binary search: numpy's hash-based isin is seconds slower on a million codes."""
    if len(pool) == 0:
        return np.zeros(len(values), dtype=bool)
    ordered = np.sort(pool)
    at = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return ordered[at] == values
