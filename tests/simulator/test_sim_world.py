"""Determinism per seed, simulated time and the activity it produces, ground truth and planting."""

from __future__ import annotations

from datetime import timedelta
from email.utils import parsedate_to_datetime

import httpx
import pytest
from simtools import all_pages, api_client, enc, flatten

from simulator import SimulatorConfig, start_simulator
from simulator.groundtruth import RESOURCES

BOTH = {"includeArchived": "true", "includeEntryQuiz": "true"}


def _served(sim) -> dict:  # type: ignore[no-untyped-def,type-arg]
    with api_client(sim) as client:
        lesson = enc(sim.world.catalog.lesson_ids[1])
        return {
            "active": all_pages(client, "/v1/active-lessons", page_size=37),
            "answers": all_pages(client, f"/v1/lessons/{lesson}/answers", BOTH, page_size=3, pages=12),
            "groups": client.get("/v1/groups", params={"includeDisabled": "true", "pageSize": "1000"}).json(),
            "sessions": client.get("/v1/lesson-session").json(),
        }


def _truth(sim) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return {resource: list(sim.ground_truth(resource)) for resource in RESOURCES}


@pytest.mark.slow
def test_same_seed_same_world_and_pages_other_seed_differs() -> None:
    with (
        start_simulator(SimulatorConfig(seed=7, scale="tiny")) as a,
        start_simulator(SimulatorConfig(seed=7, scale="tiny")) as b,
    ):
        assert _truth(a) == _truth(b)
        assert _served(a) == _served(b)
        assert a.advance(hours=30) == b.advance(hours=30)
        assert _truth(a) == _truth(b)
    with (
        start_simulator(SimulatorConfig(seed=8, scale="tiny")) as c,
        start_simulator(SimulatorConfig(seed=7, scale="tiny")) as d,
    ):
        other, same = _truth(c), _truth(d)
        assert other["active_lessons"] != same["active_lessons"] and other["answers"] != same["answers"]


def test_clock_date_header_and_admin_routes(fresh_sim, fresh_client) -> None:
    start = fresh_sim.now()
    served_date = parsedate_to_datetime(fresh_client.get("/v1/categories").headers["date"])
    assert served_date == start  # Date is the simulated clock, not the wall clock
    moved = httpx.post(f"{fresh_sim.base_url}/_sim/advance", params={"hours": "24"}).json()
    assert moved["now"].startswith((start + timedelta(days=1)).date().isoformat())
    clock = httpx.get(f"{fresh_sim.base_url}/_sim/clock").json()
    assert clock["now"] == moved["now"]
    assert parsedate_to_datetime(fresh_client.get("/v1/categories").headers["date"]) > served_date
    assert httpx.post(f"{fresh_sim.base_url}/_sim/advance").status_code == 400
    assert httpx.post(f"{fresh_sim.base_url}/_sim/advance", params={"hours": "x"}).status_code == 400
    exported = httpx.get(f"{fresh_sim.base_url}/_sim/ground-truth/groups")
    assert [line for line in exported.text.splitlines() if line] and exported.headers["content-type"].startswith(
        "application/x-ndjson"
    )
    assert httpx.get(f"{fresh_sim.base_url}/_sim/ground-truth/nothing").status_code == 404


def test_a_day_of_activity_changes_every_kind_of_record(fresh_sim, fresh_client) -> None:
    before = _truth(fresh_sim)
    cursor = fresh_sim.now().isoformat()
    activity = fresh_sim.advance(hours=24)
    after = _truth(fresh_sim)
    for kind in (
        "new_attempts",
        "new_active_lessons",
        "new_users",
        "new_memberships",
        "vanished_members",
        "renamed_groups",
        "new_sessions",
        "new_registrations",
        "certificates_completed",
        "certificates_expired",
    ):
        assert activity.get(kind, 0) > 0, kind
    key = lambda r: (r["_userId"], r["_lessonId"])  # noqa: E731
    old = {key(r): r for r in before["active_lessons"]}
    changed = [r for r in after["active_lessons"] if old.get(key(r)) != r]
    assert changed and all(r["lastDate"] >= cursor for r in changed)  # every change moves lastDate forward
    assert len(after["active_lessons"]) > len(before["active_lessons"])
    served = flatten(all_pages(fresh_client, "/v1/active-lessons", {"updatedSince": cursor}, page_size=1000))
    assert sorted(map(key, served)) == sorted(map(key, changed))  # an incremental window sees exactly the changes
    answer_key = lambda a: (a["_activeLessonId"], a["quizType"], a["attemptIndex"], a["_questionId"])  # noqa: E731
    old_answers = {answer_key(a): a for a in before["answers"]}
    new_answers = [a for a in after["answers"] if answer_key(a) not in old_answers]
    assert new_answers and all(a["lastDate"] >= cursor for a in new_answers)
    assert all(old_answers[answer_key(a)] == a for a in after["answers"] if answer_key(a) in old_answers)  # immutable
    assert before["groups"] != after["groups"] and before["group_members"] != after["group_members"]
    assert len(after["lesson_sessions"]) > len(before["lesson_sessions"])
    assert len(after["certificates"]) > len(before["certificates"])


def test_certificates_complete_and_expire_on_the_simulated_clock(fresh_sim) -> None:
    before = {c["_id"]: c for c in fresh_sim.ground_truth("certificates")}
    fresh_sim.advance(hours=24)
    now = fresh_sim.now().isoformat()
    after = {c["_id"]: c for c in fresh_sim.ground_truth("certificates")}
    expired = [
        c
        for c in after.values()
        if c["expires"]
        and before.get(c["_id"], {}).get("expires") == c["expires"]
        and c["updatedAt"] != before[c["_id"]]["updatedAt"]
    ]
    assert expired and all(c["expires"] < now for c in expired)
    assert all(c["creationDate"] == before[c["_id"]]["creationDate"] for c in expired)
    completed = [c for c in after.values() if c["_id"] not in before]
    assert completed and all(c["expires"] is None or c["expires"] > c["creationDate"] for c in completed)


def test_plant_invalid_answer_serves_the_bad_value_once(fresh_sim, fresh_client) -> None:
    identity = fresh_sim.plant_invalid("answers", field="quizType", value="final")
    lesson = enc(identity["_lessonId"])
    rows = flatten(all_pages(fresh_client, f"/v1/lessons/{lesson}/answers", BOTH, page_size=1000, pages=1))
    bad = [a for a in rows if a["quizType"] == "final"]
    assert len(bad) == 1 and bad[0]["_activeLessonId"] == identity["_activeLessonId"]
    assert bad[0]["_questionId"] == identity["_questionId"] and bad[0]["attemptIndex"] == identity["attemptIndex"]
    group = fresh_sim.plant_invalid("groups", field="disabled", value="yes")
    listed = fresh_client.get(f"/v1/groups/{enc(group['id'])}").json()
    assert listed["disabled"] == "yes"
    al = fresh_sim.plant_invalid("active_lessons", field="score", value="high", touch=True)
    recent = fresh_client.get("/v1/active-lessons", params={"updatedSince": fresh_sim.now().isoformat()}).json()
    assert [(r["_userId"], r["score"]) for r in recent] == [(al["_userId"], "high")]


def test_ground_truth_is_a_snapshot(fresh_sim) -> None:
    records = fresh_sim.ground_truth("active_lessons")
    first = next(records)
    count_then = fresh_sim.world.store.n
    fresh_sim.advance(hours=48)
    rest = list(records)
    assert fresh_sim.world.store.n > count_then  # new active lessons started meanwhile...
    assert 1 + len(rest) == count_then and first["_ownerId"]  # ...and are not in the snapshot under way
