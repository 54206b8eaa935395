"""Lesson sessions: stored as API records (registrations inside), created and changed by the API and by
simulated activity. Nullable fields are null in a share of generated sessions, as the spec allows."""

from __future__ import annotations

import hashlib
import random
import uuid
from typing import Any

from simulator.names import CITIES, SPECIAL_SESSION_ID
from simulator.rng import object_id
from simulator.schemas import LessonSessionUpdateBody
from simulator.timeutil import MS_PER_DAY, MS_PER_HOUR, iso, parse_instant

KIND_SESSION = 9
REGISTRATION_STATUSES = ("approved", "approved", "pending-validation", "waiting-list", "rejected")
ATTENDANCES = ("attended", "absent", "none")


class SessionStore:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.records: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def get(self, session_id: str) -> dict[str, Any] | None:
        at = self._index.get(session_id)
        return None if at is None else self.records[at]

    def _add(self, record: dict[str, Any]) -> dict[str, Any]:
        self._index[record["id"]] = len(self.records)
        self.records.append(record)
        return record

    def _new_ids(self) -> tuple[str, str]:
        n = len(self.records)
        guid = uuid.UUID(bytes=hashlib.md5(f"session:{self.seed}:{n}".encode()).digest(), version=4)
        return object_id(self.seed, KIND_SESSION, n), str(guid)

    def create(self, body: LessonSessionUpdateBody, now_ms: int) -> dict[str, Any]:
        session_id, guid = self._new_ids()
        record: dict[str, Any] = {
            "id": session_id,
            "guid": guid,
            "title": None,
            "description": None,
            "lessonId": None,
            "creatorId": None,
            "status": None,
            "quotas": None,
            "startDate": None,
            "endDate": None,
            "creationDate": iso(now_ms),
            "presenters": [],
            "codes": None,
            "location": None,
            "onSite": False,
            "isLive": False,
            "registrations": [],
        }
        _apply(record, body)
        return self._add(record)

    def update(self, record: dict[str, Any], body: LessonSessionUpdateBody) -> dict[str, Any]:
        _apply(record, body)
        return record

    @staticmethod
    def register(
        record: dict[str, Any], user_id: str, now_ms: int, status: str = "approved", attendance: str = "none"
    ) -> bool:
        if any(r["userId"] == user_id for r in record["registrations"]):
            return False
        record["registrations"].append(
            {
                "userId": user_id,
                "status": status,
                "signatureDate": None,
                "registrationDate": iso(now_ms),
                "attendance": attendance,
            }
        )
        return True

    @staticmethod
    def unregister(record: dict[str, Any], user_id: str) -> bool:
        before = len(record["registrations"])
        record["registrations"] = [r for r in record["registrations"] if r["userId"] != user_id]
        return len(record["registrations"]) != before

    def for_user(self, user_id: str) -> list[dict[str, Any]]:
        return [s for s in self.records if any(r["userId"] == user_id for r in s["registrations"])]

    def generate(
        self, rng: random.Random, now_ms: int, lesson_ids: list[str], user_ids: list[str], *, special: bool = False
    ) -> dict[str, Any]:
        """A session as simulated activity or the initial data creates it; nullable fields sometimes null."""
        session_id, guid = self._new_ids()
        if special:
            session_id = SPECIAL_SESSION_ID
        null = [rng.random() < 0.2 for _ in range(8)]
        begins = now_ms + rng.randrange(-30 * MS_PER_DAY, 30 * MS_PER_DAY)
        city = rng.choice(CITIES)
        quota_type = rng.choice(("none", "max", "min", "min-max"))
        quota: dict[str, Any] = {"type": quota_type}
        if quota_type in ("min", "min-max"):
            quota["min"] = rng.randrange(2, 6)
        if quota_type in ("max", "min-max"):
            quota["max"] = rng.randrange(8, 30)
        record: dict[str, Any] = {
            "id": session_id,
            "guid": None if null[0] else guid,
            "title": None if null[1] else f"Session {city} — {len(self.records) + 1}",
            "description": None if null[2] else f"Rendez-vous à {city}, salle « Horizon »",
            "lessonId": None if null[3] else rng.choice(lesson_ids),
            "creatorId": None if null[4] else rng.choice(user_ids),
            "status": rng.choice(("draft", "online", "online", "online", "cancelled", "deleted")),
            "quotas": None if null[5] else quota,
            "startDate": None if null[6] else iso(begins),
            "endDate": None if null[6] else iso(begins + 2 * MS_PER_HOUR),
            "creationDate": iso(now_ms - rng.randrange(MS_PER_HOUR, 40 * MS_PER_DAY)),
            "presenters": rng.sample(user_ids, min(len(user_ids), rng.randrange(0, 3))),
            "codes": None if null[7] else [{"type": "qr", "value": f"QR-{len(self.records):05d}"}],
            "location": None
            if rng.random() < 0.3
            else {
                "lang": "fr",
                "name": f"Campus {city}",
                "room": f"Salle {rng.randrange(1, 40)}",
                "address": f"{rng.randrange(1, 200)} rue de la Paix, {city}",
                "name_i18n": [{"lang": "fr", "value": f"Campus {city}"}, {"lang": "en", "value": f"{city} campus"}],
            },
            "onSite": bool(rng.random() < 0.6),
            "isLive": bool(rng.random() < 0.2),
            "registrations": [],
        }
        for user_id in rng.sample(user_ids, min(len(user_ids), rng.randrange(0, 9))):
            self.register(
                record,
                user_id,
                now_ms - rng.randrange(0, 20 * MS_PER_DAY),
                rng.choice(REGISTRATION_STATUSES),
                rng.choice(ATTENDANCES),
            )
            if rng.random() < 0.4:
                record["registrations"][-1]["signatureDate"] = record["registrations"][-1]["registrationDate"]
        return self._add(record)


def _apply(record: dict[str, Any], body: LessonSessionUpdateBody) -> None:
    """Copy the properties the body gives onto the response record; the response spells some differently
    (quota -> quotas, onsite -> onSite, hasLive -> isLive) and its nested objects carry no nulls."""
    for name, value in body.model_dump(by_alias=True, exclude_unset=True).items():
        if name in ("title", "description", "status", "lessonId"):
            record[name] = value
        elif name == "presenters":
            record["presenters"] = value or []
        elif name == "quota":
            record["quotas"] = None if value is None else _without_nulls(value)
        elif name == "codes":
            record["codes"] = None if value is None else [_without_nulls(code) for code in value]
        elif name == "location":
            # the response location allows no other properties: copy only what both schemas share
            record["location"] = (
                None if value is None else _without_nulls({"room": value.get("room"), "name": value.get("name")})
            )
        elif name in ("startDate", "endDate"):
            record[name] = None if value is None else iso(parse_instant(value, name=name))
        elif name == "onsite":
            record["onSite"] = bool(value)
        elif name == "hasLive":
            record["isLive"] = bool(value)


def _without_nulls(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
