"""The simulated platform's state and clock. Every reader and writer holds `lock` (an RLock): the HTTP
server's event loop, the test thread calling `advance`, and the webhook sender's subscribers."""

from __future__ import annotations

import hashlib
import hmac
import random
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np

from simulator.catalog import build_catalog
from simulator.certificates import CertificateEvent, CertificateStore
from simulator.config import SimulatorConfig
from simulator.directory import build_directory
from simulator.genprogress import generate_active_lessons
from simulator.newfields import NewField
from simulator.render import active_lesson_id
from simulator.rng import object_id, pyrandom
from simulator.sessions import SessionStore
from simulator.store import NO_SCORE, STATUSES, SUCCEEDED
from simulator.timeutil import MS_PER_DAY, MS_PER_HOUR, from_ms, to_ms
from simulator.views import ActiveLessonViews

CertificateListener = Callable[[list[CertificateEvent]], None]


class UnknownCallback(LookupError):
    """The callback token names no active lesson (404)."""


class ForbiddenCallback(PermissionError):
    """The callback token names an active lesson but is not valid for it, or was revoked (403)."""


class World:
    def __init__(self, config: SimulatorConfig) -> None:
        self.config = config
        self.seed = config.seed
        self.lock = threading.RLock()
        self.owner_id = object_id(config.seed, 0, 0)
        self.clock_ms = to_ms(config.start)
        self.advances = 0
        profile = config.profile
        self.catalog = build_catalog(config.seed, profile.lessons, profile.categories, self.owner_id)
        self.directory = build_directory(config.seed, profile.users, profile.groups)
        self.store = generate_active_lessons(config.seed, profile, self.catalog, self.directory, self.clock_ms)
        self.views = ActiveLessonViews(self.store, config.order)
        self.sessions = SessionStore(config.seed)
        self.certificates = CertificateStore(config.seed, self.owner_id)
        self.planted_active_lessons: dict[int, dict[str, Any]] = {}
        self.planted_answers: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.new_fields: list[tuple[NewField, int]] = []  # fields sent so far, with the instant each started (ms)
        self.revoked_callbacks: set[int] = set()
        self.logged_in_users: set[str] = {u["id"] for u in self.users[::2]}  # users holding a platform token
        self._listeners: list[CertificateListener] = []
        self._callback_key = hashlib.sha256(f"callbacks:{config.seed}".encode()).digest()
        rng, user_ids = pyrandom(config.seed, 5), self.user_ids()
        for k in range(profile.sessions):
            self.sessions.generate(rng, self.clock_ms, self.catalog.lesson_ids, user_ids, special=k == 1)
        self._initial_certificates(pyrandom(config.seed, 6))

    # --- reading -----------------------------------------------------------------------------------

    @property
    def users(self) -> list[dict[str, Any]]:
        return self.directory.users

    def user_ids(self) -> list[str]:
        return [u["id"] for u in self.directory.users]

    def now(self) -> datetime:
        return from_ms(self.clock_ms)

    def counts(self) -> dict[str, int]:
        return {
            "active_lessons": self.store.n,
            "answers": int(self.store.column("att_n").sum()),
            "users": len(self.directory.users),
            "groups": len(self.directory.groups),
            "lessons": len(self.catalog.lessons),
            "lesson_sessions": len(self.sessions.records),
            "certificates": len(self.certificates.records),
        }

    # --- certificates and their listeners -----------------------------------------------------------

    def subscribe(self, listener: CertificateListener) -> None:
        with self.lock:
            self._listeners.append(listener)

    def publish(self, events: list[CertificateEvent]) -> None:
        if events:
            for listener in list(self._listeners):
                listener(events)

    def _initial_certificates(self, rng: random.Random) -> None:
        """Badges earned before the simulated start; a few expire in the first simulated day."""
        store, catalog = self.store, self.catalog
        achieved = np.flatnonzero(store.column("status") == SUCCEEDED)
        with_badge = [int(i) for i in achieved if catalog.badge_ids[int(store.lesson[i])] is not None]
        cap = max(10, store.n // 200)
        chosen = sorted(rng.sample(with_badge, min(cap, len(with_badge))))
        for rank, i in enumerate(chosen):
            lesson = int(store.lesson[i])
            at_ms = int(store.last_ms[i])
            validity: int | None | str = "draw"
            if rank < 3:  # expires within the first simulated day: expiry events without waiting long
                validity = (self.clock_ms - at_ms) // MS_PER_DAY + 1
            self.certificates.complete(
                rng,
                user_id=self.users[int(store.user[i])]["id"],
                badge_id=catalog.badge_ids[lesson] or "",
                badge_name=catalog.lesson_titles[lesson],
                active_lesson_ids=[active_lesson_id(self.seed, i)],
                at_ms=at_ms,
                validity_days=validity,
                disabled=bool(rng.random() < 0.05),  # type: ignore[arg-type]
            )
        self.certificates.expire_due(self.clock_ms)  # history: expired before start, no events

    # --- callbacks -----------------------------------------------------------------------------------

    def callback_token(self, user_id: str, lesson_id: str) -> str:
        """The CALLBACK_TOKEN path segment for the active lesson of (user, lesson)."""
        with self.lock:
            u, lesson = self.directory.user_number(user_id), self.catalog.lesson_number(lesson_id)
            found = (
                np.array([], dtype=np.int64)
                if u is None or lesson is None
                else self.views.select(
                    user=u, lesson=lesson, n_users=len(self.users), n_lessons=len(self.catalog.lesson_ids)
                )
            )
            if len(found) == 0:
                raise KeyError(f"no active lesson for user {user_id!r} and lesson {lesson_id!r}")
            return self._sign(int(found[0]))

    def _sign(self, index: int) -> str:
        message = f"{self.owner_id}|{index}".encode()
        return f"{index:x}.{hmac.new(self._callback_key, message, hashlib.sha256).hexdigest()[:24]}"

    def resolve_callback(self, token: str) -> int:
        head, _, _ = token.partition(".")
        try:
            index = int(head, 16)
        except ValueError:
            raise UnknownCallback(token) from None
        if not 0 <= index < self.store.n:
            raise UnknownCallback(token)
        if index in self.revoked_callbacks or not hmac.compare_digest(self._sign(index), token):
            raise ForbiddenCallback(token)
        return index

    def revoke_callback(self, token: str) -> None:
        with self.lock:
            self.revoked_callbacks.add(self.resolve_callback(token))

    def callback_view(self, index: int) -> dict[str, Any]:
        store = self.store
        view: dict[str, Any] = {
            "progress": int(store.progress[index]),
            "status": STATUSES[int(store.status[index])],
            "LessonID": self.catalog.lesson_ids[int(store.lesson[index])],
            "UserID": self.users[int(store.user[index])]["id"],
        }
        if store.score[index] != NO_SCORE:
            view["score"] = int(store.score[index])
            view["absoluteScore"] = int(store.n_correct[index])
        return view

    def apply_callback(self, index: int, status: str, progress: int, score: int | None) -> dict[str, Any]:
        store = self.store
        store.status[index] = STATUSES.index(status)
        store.progress[index] = progress
        if score is not None:
            store.score[index] = score
        store.last_ms[index] = max(self.clock_ms, int(store.last_ms[index]))
        store.touched()
        return self.callback_view(index)

    # --- faults: records that change while a client pages ----------------------------------------------

    def drift(self, rng: np.random.Generator, *, user: int | None = None, lesson: int | None = None) -> int:
        """Update 1-3 active lessons of the listed collection now (they move to the end in last_date order)."""
        chosen = self.views.select(
            user=user, lesson=lesson, n_users=len(self.users), n_lessons=len(self.catalog.lesson_ids)
        )
        if len(chosen) == 0:
            return 0
        picks = np.unique(chosen[rng.integers(0, len(chosen), size=int(rng.integers(1, 4)))])
        store = self.store
        store.progress[picks] = np.minimum(100, store.progress[picks] + rng.integers(1, 10, size=len(picks)))
        store.time_spent[picks] += rng.integers(10, 300, size=len(picks)).astype(np.int32)
        store.last_ms[picks] = self.clock_ms
        store.touched()
        return len(picks)

    def start_new_fields(self, at_ms: int) -> None:
        """At the start of an advance (`advances` counts it already): the new fields that start with it."""
        started = {new for new, _ in self.new_fields}
        for new in self.config.new_fields:
            assert isinstance(new, NewField)
            if new not in started and new.from_advance <= self.advances:
                self.new_fields.append((new, at_ms))

    def advance_ms(self, ms: int) -> dict[str, int]:
        """Move the simulated clock forward by `ms` and play the activity of that span."""
        from simulator.activity import play_activity

        if ms <= 0:
            raise ValueError(f"advance by a positive duration, got {ms} ms")
        if ms > 366 * MS_PER_DAY:
            raise ValueError("advance by at most 366 days at a time")
        with self.lock:
            summary, events = play_activity(self, ms)
            self.publish(events)
            return summary

    def advance(self, *, hours: float = 0, minutes: float = 0) -> dict[str, int]:
        return self.advance_ms(int(round(hours * MS_PER_HOUR + minutes * 60_000)))
