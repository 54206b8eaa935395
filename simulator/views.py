"""Which active lessons a listing covers, in serving order, cached until the store changes.

Orders: "last_date" sorts by (lastDate, insertion index), so a record updated mid-sweep moves to the
end and offset pages shift, the adversarial case of real updatedSince APIs; "key" keeps insertion order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.config import Order
from simulator.store import ActiveLessonStore


@dataclass
class _Grouped:
    perm: np.ndarray  # active-lesson indices grouped by owner column, serving order inside a group
    offsets: np.ndarray  # group g is perm[offsets[g]:offsets[g+1]]


class ActiveLessonViews:
    def __init__(self, store: ActiveLessonStore, order: Order) -> None:
        self.store = store
        self.order = order
        self._cache: dict[str, tuple[tuple[int, int], object]] = {}

    def _cached(self, name: str, build, groups: int = 0):  # type: ignore[no-untyped-def]
        version = (self.store.mutations, groups)  # new users or lessons also invalidate group offsets
        hit = self._cache.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        value = build()
        self._cache[name] = (version, value)
        return value

    def _global(self) -> tuple[np.ndarray, np.ndarray]:
        def build() -> tuple[np.ndarray, np.ndarray]:
            last = self.store.column("last_ms")
            order = np.arange(len(last)) if self.order == "key" else np.argsort(last, kind="stable")
            return order, last[order]

        return self._cached("global", build)

    def _grouped(self, column: str, groups: int) -> _Grouped:
        def build() -> _Grouped:
            key = self.store.column(column)
            if self.order == "key":
                perm = np.argsort(key, kind="stable")
            else:
                perm = np.lexsort((self.store.column("last_ms"), key))  # lexsort is stable: ties by index
            offsets = np.searchsorted(key[perm], np.arange(groups + 1))
            return _Grouped(perm, offsets)

        return self._cached(column, build, groups)

    def select(
        self,
        *,
        user: int | None = None,
        lesson: int | None = None,
        since_ms: int | None = None,
        n_users: int = 0,
        n_lessons: int = 0,
        visible_ms: int | None = None,
    ) -> np.ndarray:
        """Indices of the matching active lessons in serving order (lastDate >= since_ms and, when
        visible_ms is given, <= visible_ms)."""
        if user is None and lesson is None:
            order, sorted_last = self._global()
            if since_ms is None and visible_ms is None:
                return order
            if self.order == "last_date":
                start = 0 if since_ms is None else np.searchsorted(sorted_last, since_ms, side="left")
                end = len(order) if visible_ms is None else np.searchsorted(sorted_last, visible_ms, side="right")
                return order[start : max(start, end)]
            keep = np.ones(len(order), dtype=bool)
            if since_ms is not None:
                keep &= sorted_last >= since_ms
            if visible_ms is not None:
                keep &= sorted_last <= visible_ms
            return order[keep]
        if user is not None:
            grouped = self._grouped("user", n_users)
            chosen = grouped.perm[grouped.offsets[user] : grouped.offsets[user + 1]]
            if lesson is not None:
                chosen = chosen[self.store.lesson[chosen] == lesson]
        else:
            grouped = self._grouped("lesson", n_lessons)
            chosen = grouped.perm[grouped.offsets[lesson] : grouped.offsets[lesson + 1]]
        if since_ms is not None:
            chosen = chosen[self.store.last_ms[chosen] >= since_ms]
        if visible_ms is not None:
            chosen = chosen[self.store.last_ms[chosen] <= visible_ms]
        return chosen
