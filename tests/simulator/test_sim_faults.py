"""Injected faults over real HTTP: 5xx, 429 with Retry-After, truncated bodies, drift, latency, token TTL, a
Date header off the lastDate clock, read lag."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime

import httpx
import jwt
import orjson
import pytest
from simtools import all_pages, api_client, enc, flatten, token_pair

from simulator import FaultSpec, SimulatorConfig, parse_faults, start_simulator


def test_parse_faults() -> None:
    spec = parse_faults("error_rate=0.05, rate_limit_every=40,token_ttl=30,latency_ms=10,drift=0.01,truncate_rate=0.01")
    assert spec == FaultSpec(0.05, 40, 30.0, 10.0, 0.01, 0.01)
    assert parse_faults(str(spec)) == spec and parse_faults("") == FaultSpec() and not FaultSpec().active
    for bad, needle in (
        ("error_rate=2", "probability"),
        ("boom=1", "name=value"),
        ("rate_limit_every=x", "integer"),
        ("latency_ms=-1", "negative"),
        ("drift", "name=value"),
    ):
        with pytest.raises(ValueError, match=needle):
            parse_faults(bad)


def test_server_errors_are_injected_and_counted(fresh_sim, fresh_client) -> None:
    fresh_sim.set_faults("error_rate=1")
    statuses = set()
    for _ in range(12):
        response = fresh_client.get("/v1/categories")
        statuses.add(response.status_code)
        assert response.json()["statusCode"] == response.status_code and response.json()["kind"]
    assert statuses <= {500, 502, 503} and len(statuses) >= 2
    assert fresh_sim.stats()["faults"]["5xx"] == 12
    fresh_sim.set_faults("")
    assert fresh_client.get("/v1/categories").status_code == 200
    assert httpx.get(f"{fresh_sim.base_url}/_sim/clock").status_code == 200  # admin routes are never faulted


def test_rate_limit_every_nth_request_with_all_retry_after_forms(fresh_sim, fresh_client) -> None:
    fresh_sim.set_faults("rate_limit_every=2")
    retry_after = []
    for _ in range(12):
        response = fresh_client.get("/v1/categories")
        if response.status_code == 429:
            retry_after.append(response.headers["retry-after"])
            assert response.json()["statusCode"] == 429
        else:
            assert response.status_code == 200
    assert len(retry_after) == 6 and fresh_sim.stats()["faults"]["429"] == 6
    assert "0" in retry_after and "1" in retry_after
    dates = [parsedate_to_datetime(v) for v in retry_after if not v.isdigit()]
    assert dates and all(abs(d.timestamp() - time.time()) < 30 for d in dates)  # HTTP-date on the wall clock


def test_truncated_bodies(fresh_sim, fresh_client) -> None:
    fresh_sim.set_faults("truncate_rate=1")
    broken_json = cut_connection = 0
    for _ in range(16):
        try:
            response = fresh_client.get("/v1/active-lessons", params={"pageSize": "50"})
        except httpx.HTTPError:
            cut_connection += 1  # declared Content-Length not honoured: the connection drops mid-body
            continue
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(response.content)
        broken_json += 1
    assert broken_json and cut_connection
    assert fresh_sim.stats()["faults"]["truncated"] == 16


def test_drift_moves_records_to_the_end_and_shifts_offset_pages(fresh_sim, fresh_client) -> None:
    key = lambda r: (r["_userId"], r["_lessonId"])  # noqa: E731
    everything = {key(r) for r in fresh_sim.ground_truth("active_lessons")}
    fresh_sim.set_faults("drift=1")
    served = []
    for number in range(1, 11):
        served += fresh_client.get("/v1/active-lessons", params={"pageSize": "30", "pageNumber": str(number)}).json()
    fresh_sim.set_faults("")
    faults = fresh_sim.stats()["faults"]
    assert faults["drift_pages"] == 10 and faults["drift_moves"] >= 10
    keys = [key(r) for r in served]
    missed, repeated = everything - set(keys), len(keys) - len(set(keys))
    assert missed or repeated  # the sweep is not a consistent snapshot: that is the point of drift
    now = fresh_sim.now().isoformat()[:19]
    moved = [r for r in fresh_sim.ground_truth("active_lessons") if r["lastDate"].startswith(now)]
    assert len(moved) >= 10
    tail = fresh_client.get("/v1/active-lessons", params={"pageSize": "1000"}).json()[-len(moved) :]
    assert sorted(map(key, tail)) == sorted(map(key, moved))  # updated now, hence listed last


def test_latency_and_token_ttl_faults() -> None:
    with start_simulator(SimulatorConfig(scale="tiny", faults="latency_ms=150,token_ttl=5")) as sim:
        began = time.perf_counter()
        pair = token_pair(sim.base_url)
        assert time.perf_counter() - began >= 0.15
        claims = jwt.decode(pair["access_token"], options={"verify_signature": False})
        assert 4 <= claims["exp"] - claims["iat"] <= 6
        sim.set_faults(FaultSpec())
        with api_client(sim) as client:
            began = time.perf_counter()
            client.get("/v1/categories")
            assert time.perf_counter() - began < 2  # generous: only checks the latency fault is gone
        fresh = jwt.decode(token_pair(sim.base_url)["access_token"], options={"verify_signature": False})
        assert fresh["exp"] - fresh["iat"] > 3000


def test_lowering_the_latency_releases_the_requests_already_waiting() -> None:
    """A request waits for the latency set at each moment: a test holds a client with a long one and lets it go."""
    with start_simulator(SimulatorConfig(scale="tiny")) as sim, api_client(sim) as client:
        sim.set_faults("latency_ms=20000")
        answered: list[float] = []
        began = time.perf_counter()

        def ask() -> None:
            client.get("/v1/categories").raise_for_status()
            answered.append(time.perf_counter() - began)

        waiting = threading.Thread(target=ask)
        waiting.start()
        time.sleep(0.5)
        assert not answered, "the request was not held"
        sim.set_faults(FaultSpec())
        waiting.join(timeout=15)
        assert answered and answered[0] < 10, answered  # released, not served after the 20 s it arrived under


def test_date_offset_moves_the_date_header_off_the_lastdate_clock(fresh_sim, fresh_client) -> None:
    for minutes in (120, -45.5):
        fresh_sim.set_faults(f"date_offset_min={minutes}")
        date = parsedate_to_datetime(fresh_client.get("/v1/categories").headers["date"])
        expected = fresh_sim.now() + timedelta(minutes=minutes)
        assert abs((date - expected).total_seconds()) < 1  # the header has whole seconds
    page = fresh_client.get("/v1/active-lessons", params={"pageSize": "1000"}).json()
    assert max(datetime.fromisoformat(a["lastDate"]) for a in page) <= fresh_sim.now()  # lastDate's clock is not moved


def test_read_lag_hides_records_and_their_answers_until_they_are_old_enough(fresh_sim, fresh_client) -> None:
    fresh_sim.advance(hours=24)
    truth = list(fresh_sim.ground_truth("active_lessons"))
    newest = sorted(truth, key=lambda a: a["lastDate"])[-1]
    lag = (fresh_sim.now() - datetime.fromisoformat(newest["lastDate"])) / timedelta(minutes=1) + 1
    fresh_sim.set_faults(f"read_lag_min={lag}")  # just enough to hide the newest record
    cutoff = fresh_sim.now() - timedelta(minutes=lag)
    visible = [a for a in truth if datetime.fromisoformat(a["lastDate"]) <= cutoff]
    hidden_pair = (newest["_userId"], newest["_lessonId"])
    for params in ({}, {"updatedSince": (cutoff - timedelta(days=2)).isoformat()}):
        listed = flatten(all_pages(fresh_client, "/v1/active-lessons", params, page_size=100))
        assert hidden_pair not in {(a["_userId"], a["_lessonId"]) for a in listed}
        if not params:
            assert len(listed) == len(visible) < len(truth)
    user_answers = flatten(all_pages(fresh_client, f"/v1/users/{enc(newest['_userId'])}/answers", page_size=100))
    assert all(a["_lessonId"] != newest["_lessonId"] for a in user_answers)
    fresh_sim.set_faults("")  # caught up
    listed = flatten(all_pages(fresh_client, "/v1/active-lessons", page_size=100))
    assert hidden_pair in {(a["_userId"], a["_lessonId"]) for a in listed}


def test_read_lag_and_drift_cannot_be_combined() -> None:
    assert parse_faults("date_offset_min=-120,read_lag_min=5") == FaultSpec(date_offset_min=-120, read_lag_min=5)
    with pytest.raises(ValueError, match="read_lag_min=-1.0 must not be negative"):
        parse_faults("read_lag_min=-1")
    with pytest.raises(ValueError, match="cannot be combined"):
        parse_faults("drift=0.1,read_lag_min=5")
