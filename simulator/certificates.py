"""Certificates (badges earned by users): current state per `_id`, and the events the webhook sender
delivers. A completion is `certificate_completed`; reaching `expires` on the simulated clock is
`certificate_expired` (expires now in the past, expiryReminderSent usually true, creationDate kept)."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from simulator.rng import object_id
from simulator.timeutil import MS_PER_DAY, MS_PER_SECOND, iso, to_ms

KIND_CERTIFICATE = 10
VALIDITY_DAYS: tuple[int | None, ...] = (None, None, 1, 3, 7, 30, 90, 365, 365)
EventType = Literal["certificate_completed", "certificate_expired"]


@dataclass(frozen=True)
class CertificateEvent:
    event_type: EventType
    at_ms: int  # simulated instant the event happened
    payload: dict[str, Any]  # Certificate as delivered (a deep copy: later changes do not leak in)


class CertificateStore:
    def __init__(self, seed: int, owner_id: str) -> None:
        self.seed = seed
        self.owner_id = owner_id
        self.records: dict[str, dict[str, Any]] = {}
        self._expiry: list[tuple[int, str]] = []
        self._held: set[tuple[str, str]] = set()  # (user, badge) with a live certificate

    def holds(self, user_id: str, badge_id: str) -> bool:
        return (user_id, badge_id) in self._held

    def complete(
        self,
        rng: random.Random,
        *,
        user_id: str,
        badge_id: str,
        badge_name: str,
        active_lesson_ids: list[str],
        at_ms: int,
        validity_days: int | None | Literal["draw"] = "draw",
        disabled: bool = False,
    ) -> CertificateEvent:
        if validity_days == "draw":
            validity_days = rng.choice(VALIDITY_DAYS)
        cert_id = object_id(self.seed, KIND_CERTIFICATE, len(self.records))
        expires = None if validity_days is None else at_ms + validity_days * MS_PER_DAY
        rule: dict[str, Any] = {
            "type": "lesson-success",
            "name": badge_name,
            "description": f"Décerné après la réussite de « {badge_name} »",
        }
        if validity_days is not None:
            rule["validityDurationDays"] = validity_days
        created = at_ms + rng.randrange(0, 5 * MS_PER_SECOND)
        record: dict[str, Any] = {
            "_id": cert_id,
            "_userId": user_id,
            "_ownerId": self.owner_id,
            "_badgeId": badge_id,
            "creationDate": iso(at_ms),
            "expires": None if expires is None else iso(expires),
            "disabled": disabled,
            "expiryReminderSent": False,
            "_lessonActiveIds": active_lesson_ids,
            "ruleData": rule,
            "createdAt": iso(created),
            "updatedAt": iso(created),
        }
        if rng.random() < 0.8:  # "__v may be absent"
            record["__v"] = 0
        self.records[cert_id] = record
        self._held.add((user_id, badge_id))
        if expires is not None:
            heapq.heappush(self._expiry, (expires, cert_id))
        return CertificateEvent("certificate_completed", at_ms, _copy(record))

    def expire_due(self, until_ms: int) -> list[CertificateEvent]:
        """Expire every certificate whose `expires` is at or before `until_ms`, in expiry order."""
        events = []
        while self._expiry and self._expiry[0][0] <= until_ms:
            expires, cert_id = heapq.heappop(self._expiry)
            record = self.records[cert_id]
            record["expiryReminderSent"] = int(cert_id[-2:], 16) % 10 != 0  # usually true
            record["updatedAt"] = iso(expires + MS_PER_SECOND)
            if "__v" in record:
                record["__v"] += 1
            self._held.discard((record["_userId"], record["_badgeId"]))
            events.append(CertificateEvent("certificate_expired", expires + MS_PER_SECOND, _copy(record)))
        return events

    def current(self) -> list[dict[str, Any]]:
        return [_copy(r) for r in self.records.values()]

    @staticmethod
    def event_type_of(record: dict[str, Any], now_ms: int) -> EventType:
        expires = record.get("expires")
        if expires is not None and to_ms(datetime.fromisoformat(expires)) <= now_ms:
            return "certificate_expired"
        return "certificate_completed"


def _copy(record: dict[str, Any]) -> dict[str, Any]:
    """A copy deep enough that later changes to the stored record never reach a queued delivery."""
    return {**record, "_lessonActiveIds": list(record["_lessonActiveIds"]), "ruleData": dict(record["ruleData"])}
