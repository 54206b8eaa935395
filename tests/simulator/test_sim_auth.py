"""Tokens over real HTTP: exchange, 401s on protected operations, refresh (single use), expiry, logout."""

from __future__ import annotations

import time

import httpx
import jwt
import pytest
from simtools import api_client, enc, token_pair

from simulator import SimulatorConfig, start_simulator

PROTECTED = [
    ("GET", "/v1/active-lessons"),
    ("GET", "/v1/users/{user}/active-lessons"),
    ("GET", "/v1/lessons/{lesson}/active-lessons"),
    ("GET", "/v1/users/{user}/lessons/{lesson}/active-lessons"),
    ("GET", "/v1/users/{user}/lessons/{lesson}/answers"),
    ("GET", "/v1/lessons/{lesson}/answers"),
    ("GET", "/v1/users/{user}/answers"),
    ("POST", "/v1/auth/logout-by-id"),
    ("GET", "/v1/categories"),
    ("GET", "/v1/groups"),
    ("GET", "/v1/groups/name/{group_name}/users"),
    ("GET", "/v1/groups/name/{group_name}"),
    ("GET", "/v1/groups/{group}/users"),
    ("GET", "/v1/groups/{group}"),
    ("GET", "/v1/lesson-session"),
    ("POST", "/v1/lesson-session"),
    ("GET", "/v1/lesson-session/{session}"),
    ("PUT", "/v1/lesson-session/{session}"),
    ("POST", "/v1/lesson-session/{session}/register/{user}"),
    ("DELETE", "/v1/lesson-session/{session}/unregister/{user}"),
    ("GET", "/v1/lesson-session/{user}/registrations"),
    ("GET", "/v1/lessons"),
]


def _path(template: str, sim) -> str:  # type: ignore[no-untyped-def]
    world = sim.world
    return template.format(
        user=enc(world.users[0]["id"]),
        lesson=enc(world.catalog.lesson_ids[0]),
        group=enc(world.directory.groups[0]["id"]),
        group_name=enc(world.directory.groups[0]["uniqueName"]),
        session=enc(world.sessions.records[0]["id"]),
    )


@pytest.mark.parametrize(("method", "template"), PROTECTED)
def test_protected_operation_without_token_is_401(sim, method: str, template: str) -> None:
    response = httpx.request(method, sim.base_url + _path(template, sim), json={})
    assert response.status_code == 401
    body = response.json()
    assert body["statusCode"] == 401 and body["kind"] == "unauthorized" and "Bearer" in body["message"]


def test_bad_secret_is_401_and_good_secret_gives_an_admin_jwt_for_the_owner(sim) -> None:
    assert httpx.post(f"{sim.base_url}/v1/token", json={"appSecret": "wrong"}).status_code == 401
    assert httpx.post(f"{sim.base_url}/v1/token", json={"secret": "x"}).status_code == 400
    pair = token_pair(sim.base_url)
    claims = jwt.decode(pair["access_token"], options={"verify_signature": False})
    assert claims["scope"] == "admin" and claims["owner"] == sim.world.owner_id
    listed = httpx.get(
        f"{sim.base_url}/v1/active-lessons",
        params={"pageSize": "1"},
        headers={"Authorization": f"Bearer {pair['access_token']}"},
    ).json()
    assert listed[0]["_ownerId"] == claims["owner"]


def test_tampered_token_is_401(sim) -> None:
    token = token_pair(sim.base_url)["access_token"]
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    for header in (f"Bearer {forged}", f"Basic {token}", "Bearer", "Token abc"):
        assert httpx.get(f"{sim.base_url}/v1/categories", headers={"Authorization": header}).status_code == 401


def test_refresh_gives_a_new_pair_and_a_refresh_token_is_single_use(sim) -> None:
    pair = token_pair(sim.base_url)
    refreshed = httpx.post(f"{sim.base_url}/v1/token/refresh", json={"refreshToken": pair["refresh_token"]})
    assert refreshed.status_code == 200
    new = refreshed.json()
    assert new["access_token"] != pair["access_token"] and new["refresh_token"] != pair["refresh_token"]
    ok = httpx.get(f"{sim.base_url}/v1/categories", headers={"Authorization": f"Bearer {new['access_token']}"})
    assert ok.status_code == 200
    reused = httpx.post(f"{sim.base_url}/v1/token/refresh", json={"refreshToken": pair["refresh_token"]})
    assert reused.status_code == 401 and reused.json()["kind"] == "unauthorized"
    assert httpx.post(f"{sim.base_url}/v1/token/refresh", json={"refreshToken": "nope"}).status_code == 401


def test_access_token_expires_on_the_wall_clock() -> None:
    with start_simulator(SimulatorConfig(scale="tiny", token_ttl_seconds=3)) as sim:
        token = token_pair(sim.base_url)["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        sim.advance(hours=48)  # simulated time does not age tokens
        assert httpx.get(f"{sim.base_url}/v1/categories", headers=headers).status_code == 200
        expires = jwt.decode(token, options={"verify_signature": False})["exp"]
        time.sleep(max(0.0, expires - time.time()) + 1.05)  # exp is checked with one-second resolution
        expired = httpx.get(f"{sim.base_url}/v1/categories", headers=headers)
        assert expired.status_code == 401 and "expired" in expired.json()["message"]


def test_logout_by_id(sim) -> None:
    with api_client(sim) as client:
        user_id = sim.world.users[0]["id"]
        assert user_id in sim.world.logged_in_users
        first = client.post("/v1/auth/logout-by-id", json={"id": user_id})
        assert first.status_code == 200 and first.json()["tokenDeleted"] is True
        assert user_id not in sim.world.logged_in_users
        assert client.post("/v1/auth/logout-by-id", json={"id": user_id}).json()["tokenDeleted"] is False
        missing = client.post("/v1/auth/logout-by-id", json={"id": "no such user"})
        assert missing.status_code == 404 and missing.json()["statusCode"] == 404
        assert client.post("/v1/auth/logout-by-id", json={}).status_code == 400


def test_secrets_never_in_reprs_and_bad_config_fails_early() -> None:
    config = SimulatorConfig(
        app_secret="s3cr3t-value", webhook_url="http://ada:pa55@127.0.0.1:9/x", webhook_auth="bearer:tok3n"
    )
    text = repr(config)
    assert "s3cr3t-value" not in text and "tok3n" not in text and "pa55" not in text and "127.0.0.1:9" in text
    with pytest.raises(ValueError, match="error_rate"):
        SimulatorConfig(faults="error_rate=lots")
    with pytest.raises(ValueError, match="scale"):
        SimulatorConfig(scale="huge")  # type: ignore[arg-type]
