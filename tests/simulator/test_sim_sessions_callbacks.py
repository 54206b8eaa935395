"""Lesson sessions (create, read, update, register, unregister) and the public status callbacks."""

from __future__ import annotations

import httpx
import pytest
from simtools import enc

from pipeline.contract.models import LessonSession
from simulator.names import SPECIAL_SESSION_ID
from simulator.timeutil import iso, to_ms

BODY = {
    "title": "Atelier sécurité",
    "description": "Salle 2",
    "lessonId": "",
    "presenters": ["p1"],
    "status": "online",
    "type": "fixed-date",
    "registrationGroupType": "unlimited",
    "quota": {"type": "max", "max": 12},
    "location": {"room": "B12", "name": "Campus Lyon"},
    "startDate": "2026-12-01T09:00:00+01:00",
    "endDate": "2026-12-01T11:00:00Z",
    "onsite": True,
    "codes": [{"type": "qr", "value": "QR-1"}],
}


def test_sessions_list_and_nullable_fields(fresh_sim, fresh_client) -> None:
    sessions = fresh_client.get("/v1/lesson-session").json()
    assert sessions == list(fresh_sim.ground_truth("lesson_sessions"))
    for record in sessions:
        LessonSession.model_validate(record)
    assert any(record["guid"] is None or record["quotas"] is None for record in sessions)
    special = fresh_client.get(f"/v1/lesson-session/{enc(SPECIAL_SESSION_ID)}")
    assert special.status_code == 200 and special.json()["id"] == SPECIAL_SESSION_ID


def test_create_get_update_register_unregister(fresh_sim, fresh_client) -> None:
    lesson_id = fresh_sim.world.catalog.lesson_ids[2]
    created = fresh_client.post("/v1/lesson-session", json={**BODY, "lessonId": lesson_id})
    assert created.status_code == 200, created.text
    session = created.json()
    LessonSession.model_validate(session)
    assert session["quotas"] == {"type": "max", "max": 12} and session["onSite"] is True
    assert session["startDate"] == "2026-12-01T08:00:00.000Z" and session["registrations"] == []
    sid = enc(session["id"])
    assert fresh_client.get(f"/v1/lesson-session/{sid}").json() == session
    updated = fresh_client.put(f"/v1/lesson-session/{sid}", json={"title": "Renommé", "status": "cancelled"})
    assert updated.status_code == 200 and updated.json()["title"] == "Renommé"
    assert updated.json()["status"] == "cancelled" and updated.json()["description"] == "Salle 2"
    user_id = fresh_sim.world.users[3]["id"]
    registered = fresh_client.post(f"/v1/lesson-session/{sid}/register/{enc(user_id)}").json()
    assert [r["userId"] for r in registered["registrations"]] == [user_id]
    again = fresh_client.post(f"/v1/lesson-session/{sid}/register/{enc(user_id)}").json()
    assert len(again["registrations"]) == 1  # registering twice keeps one registration
    mine = fresh_client.get(f"/v1/lesson-session/{enc(user_id)}/registrations").json()
    assert session["id"] in [s["id"] for s in mine]
    removed = fresh_client.delete(f"/v1/lesson-session/{sid}/unregister/{enc(user_id)}").json()
    assert removed["registrations"] == []
    assert session["id"] in [s["id"] for s in fresh_sim.ground_truth("lesson_sessions")]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/lesson-session", {**BODY, "status": "live"}, 400),
        ("POST", "/v1/lesson-session", {"title": "only a title"}, 400),
        ("POST", "/v1/lesson-session", {**BODY, "lessonId": "no-such-lesson"}, 400),
        ("POST", "/v1/lesson-session", {**BODY, "startDate": "tomorrow"}, 400),
        ("GET", "/v1/lesson-session/no-such-session", None, 403),
        ("PUT", "/v1/lesson-session/no-such-session", {"title": "x"}, 404),
        ("PUT", "/v1/lesson-session/{session}", {"quota": {"type": "max", "extra": 1}}, 400),
        ("PUT", "/v1/lesson-session/{session}", {"endDate": "not a date"}, 400),
        ("POST", "/v1/lesson-session/no-such-session/register/{user}", None, 404),
        ("POST", "/v1/lesson-session/{session}/register/no-such-user", None, 400),
        ("DELETE", "/v1/lesson-session/no-such-session/unregister/{user}", None, 404),
        ("DELETE", "/v1/lesson-session/{session}/unregister/no-such-user", None, 400),
        ("GET", "/v1/lesson-session/no-such-user/registrations", None, 400),
    ],
)
def test_session_errors(sim, client, method, path, body, status) -> None:  # type: ignore[no-untyped-def]
    world = sim.world
    lesson_id = world.catalog.lesson_ids[0]
    if isinstance(body, dict) and body.get("lessonId") == "":
        body = {**body, "lessonId": lesson_id}
    url = path.format(session=enc(world.sessions.records[0]["id"]), user=enc(world.users[0]["id"]))
    before = list(sim.ground_truth("lesson_sessions"))
    response = client.request(method, url, json=body)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"statusCode", "kind", "message"} and response.json()["statusCode"] == status
    assert list(sim.ground_truth("lesson_sessions")) == before  # a refused request changes nothing


def test_callbacks_read_and_update_an_active_lesson(fresh_sim) -> None:
    truth = list(fresh_sim.ground_truth("active_lessons"))
    target = truth[10]
    token = fresh_sim.callback_token(target["_userId"], target["_lessonId"])
    url = f"{fresh_sim.base_url}/v1/callbacks/update-user-lesson-status/{enc(token)}"
    current = httpx.get(url)  # public: no bearer token
    assert current.status_code == 200
    assert current.json()["UserID"] == target["_userId"] and current.json()["LessonID"] == target["_lessonId"]
    fresh_sim.advance(hours=1)
    updated = httpx.post(url, json={"status": "succeeded", "progress": 100, "score": 87})
    assert updated.status_code == 200
    expected = {
        "progress": 100,
        "status": "succeeded",
        "LessonID": target["_lessonId"],
        "UserID": target["_userId"],
        "score": 87,
    }
    assert {k: updated.json()[k] for k in expected} == expected
    after = next(
        r
        for r in fresh_sim.ground_truth("active_lessons")
        if (r["_userId"], r["_lessonId"]) == (target["_userId"], target["_lessonId"])
    )
    assert after["stats"]["progressInPercent"] == 100 and after["score"] == 87 and after["achieved"] is True
    assert after["lastDate"] > target["lastDate"] and after["lastDate"] == iso(to_ms(fresh_sim.now()))
    assert httpx.get(url).json()["status"] == "succeeded"


@pytest.mark.parametrize(
    "body",
    [
        {"status": "succeeded", "progress": 101},
        {"status": "succeeded", "progress": -1},
        {"status": "succeeded", "progress": 50.5},
        {"status": "succeeded", "progress": "50"},
        {"status": "succeeded", "progress": 50, "score": 101},
        {"status": "done", "progress": 50},
        {"progress": 50},
    ],
)
def test_callback_validation_is_400(fresh_sim, body) -> None:  # type: ignore[no-untyped-def]
    target = next(iter(fresh_sim.ground_truth("active_lessons")))
    token = fresh_sim.callback_token(target["_userId"], target["_lessonId"])
    response = httpx.post(f"{fresh_sim.base_url}/v1/callbacks/update-user-lesson-status/{enc(token)}", json=body)
    assert response.status_code == 400 and response.json()["kind"] == "bad_request"


def test_callback_tokens_403_and_404(fresh_sim) -> None:
    target = next(iter(fresh_sim.ground_truth("active_lessons")))
    token = fresh_sim.callback_token(target["_userId"], target["_lessonId"])
    base = f"{fresh_sim.base_url}/v1/callbacks/update-user-lesson-status/"
    tampered = token[:-1] + ("0" if token[-1] != "0" else "1")
    body = {"status": "in-progress", "progress": 10}
    for method in ("GET", "POST"):
        assert httpx.request(method, base + enc(tampered), json=body).status_code == 403
        assert httpx.request(method, base + "unknown-token", json=body).status_code == 404
        assert httpx.request(method, base + "ffffffff.0123", json=body).status_code == 404
    fresh_sim.world.revoke_callback(token)
    revoked = httpx.post(base + enc(token), json=body)
    assert revoked.status_code == 403 and revoked.json()["statusCode"] == 403
