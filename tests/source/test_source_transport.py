"""Transport and auth over real HTTP (a scripted Starlette server on loopback): retries, Retry-After: 0,
exhausted retries, truncated bodies, 401 -> refresh -> exchange, shared refresh, secrets never shown."""

import asyncio
import logging
import re

import pytest
from pydantic import SecretStr
from source_edge_server import SECRET, EdgeState, edge_server, raw, status

from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.errors import PlatformAuthError, PlatformRequestError, PlatformResponseError
from pipeline.source.fetching import SourceCore
from pipeline.source.transport import json_body

CATEGORIES = [{"name": "Safety", "ownerID": "o", "id": "c1"}, {"name": "Sales", "ownerID": "o", "id": "c2"}]


def settings_for(url: str, **overrides) -> Settings:
    values = {
        "base_url": url,
        "app_secret": SecretStr(SECRET),
        "first_page": "1",
        "max_attempts": 4,
        "retry_max_wait": 0.5,
        "data_dir": "unused",
    }
    return Settings(**{**values, **overrides})


def categories(client: PlatformClient) -> list[dict]:
    return [row for batch in client.iter_stream("categories") for row in batch.records.to_pylist()]


@pytest.fixture
def state():
    return EdgeState(body=CATEGORIES)


def test_retry_after_zero_waits_and_stops_after_max_attempts(state, caplog):
    state.script = [status(429, {"Retry-After": "0"})] * 10
    caplog.set_level(logging.INFO, logger="lessonsync.source")
    with (
        edge_server(state) as url,
        PlatformClient(settings_for(url)) as client,
        pytest.raises(PlatformRequestError) as failure,
    ):
        categories(client)
    assert len(state.seen) == 4  # max_attempts, not a spin
    waits = [float(w) for w in re.findall(r"waiting ([0-9.]+) s", caplog.text)]
    assert len(waits) == 3 and all(w >= 0.1 for w in waits)
    assert failure.value.status == 429 and failure.value.attempts == 4


def test_exhausted_retries_name_endpoint_params_and_status(state):
    state.script = [status(503)] * 10
    with (
        edge_server(state) as url,
        PlatformClient(settings_for(url, max_attempts=3)) as client,
        pytest.raises(PlatformRequestError) as failure,
    ):
        list(client.iter_stream("groups"))
    message = str(failure.value)
    assert "GET /v1/groups" in message and "'pageNumber': '1'" in message and "'includeDisabled': 'true'" in message
    assert "last status 503" in message and "3 attempt" in message
    assert len(state.seen) == 3


def test_the_retry_budget_ends_retries_on_time_not_after_it(state, caplog):
    state.script = [status(503)] * 1000
    caplog.set_level(logging.INFO, logger="lessonsync.source")
    with (
        edge_server(state) as url,
        PlatformClient(settings_for(url, retry_budget=1.5, max_attempts=1000, retry_max_wait=0.4)) as client,
        pytest.raises(PlatformRequestError) as failure,
    ):
        list(client.iter_stream("categories"))
    waits = [float(w) for w in re.findall(r"waiting ([0-9.]+) s", caplog.text)]
    assert sum(waits) <= 1.5 + 1e-6 and sum(waits) >= 1.0  # the budget spent, never overshot by a wait
    assert len(state.seen) == len(waits) + 1 and failure.value.attempts == len(waits) + 1 >= 5
    assert "last status 503" in str(failure.value) and "LESSONSYNC_RETRY_BUDGET" in str(failure.value)


def test_client_errors_are_not_retried(state):
    state.script = [status(400)]
    with (
        edge_server(state) as url,
        PlatformClient(settings_for(url)) as client,
        pytest.raises(PlatformRequestError, match="last status 400"),
    ):
        categories(client)
    assert len(state.seen) == 1


def test_transient_failures_and_truncated_bodies_are_retried(state):
    state.script = [status(500), raw(b'[{"name": "Safety", "ownerID": "o"'), status(502)]
    with edge_server(state) as url, PlatformClient(settings_for(url, max_attempts=5)) as client:
        rows = categories(client)
        stats = client.last_run_stats()
    assert [(r["id"], r["name"], r["owner_id"]) for r in rows] == [("c1", "Safety", "o"), ("c2", "Sales", "o")]
    assert (stats.requests, stats.retries) == (5, 3)  # the token exchange counts too
    assert len(state.seen) == 4


def test_a_page_that_is_not_an_array_is_a_clear_error(state):
    state.body = {"items": CATEGORIES}
    with (
        edge_server(state) as url,
        PlatformClient(settings_for(url)) as client,
        pytest.raises(PlatformResponseError, match=r"GET /v1/categories page 0 .*JSON array"),
    ):
        categories(client)


def test_401_refreshes_once_and_a_refused_refresh_exchanges_again(state):
    with edge_server(state) as url, PlatformClient(settings_for(url)) as client:
        categories(client)
        state.valid.clear()  # the platform forgot our token
        categories(client)
        assert (state.exchanges, state.refreshes) == (1, 1)
        state.valid.clear()
        state.refuse_refresh = True
        categories(client)
        assert (state.exchanges, state.refreshes) == (2, 1)


def test_opaque_tokens_are_used_until_401(state):
    state.token_ttl = None
    with edge_server(state) as url, PlatformClient(settings_for(url)) as client:
        categories(client)
        categories(client)
        assert (state.exchanges, state.refreshes) == (1, 0)
        state.valid.clear()
        categories(client)
        assert state.refreshes == 1


def test_short_lived_jwt_is_refreshed_before_expiry(state):
    state.token_ttl = 1
    with edge_server(state) as url, PlatformClient(settings_for(url)) as client:
        categories(client)
        asyncio.run(asyncio.sleep(1.0))
        categories(client)
    assert state.refreshes == 1
    assert all(r.headers.get("authorization") for r in state.seen)


def test_concurrent_401s_share_one_refresh(state):
    async def scenario(url: str) -> None:
        core = SourceCore(settings_for(url, concurrency=8).client)
        await core.transport.get("/v1/categories", {}, json_body)
        state.valid.clear()
        await asyncio.gather(*(core.transport.get("/v1/categories", {}, json_body) for _ in range(8)))
        await core.transport.aclose()

    with edge_server(state) as url:
        asyncio.run(scenario(url))
    assert (state.exchanges, state.refreshes) == (1, 1)
    assert len(state.seen) == 1 + 8 + 8  # every rejected request retried once with the new token


def test_renewed_tokens_that_expire_in_transit_are_renewed_again(state):
    async def scenario(url: str) -> None:
        core = SourceCore(settings_for(url).client)
        await core.transport.get("/v1/categories", {}, json_body)
        state.valid.clear()
        state.reject_next_tokens = 2  # the first two renewals arrive already expired
        await core.transport.get("/v1/categories", {}, json_body)
        await core.transport.aclose()

    with edge_server(state) as url:
        asyncio.run(scenario(url))
    assert state.exchanges + state.refreshes == 1 + 3
    assert len(state.seen) == 1 + 4  # rejected with the old token and two renewed ones, answered with the third


def test_rejected_fresh_token_and_bad_secret_are_auth_errors(state):
    with edge_server(state) as url:
        state.reject_all_tokens = True
        with PlatformClient(settings_for(url)) as client, pytest.raises(PlatformAuthError, match="freshly"):
            categories(client)
        state.reject_all_tokens = False
        wrong = settings_for(url, app_secret=SecretStr("not-the-secret-xyz"))
        with PlatformClient(wrong) as client, pytest.raises(PlatformAuthError) as failure:
            categories(client)
    assert "LESSONSYNC_APP_SECRET" in str(failure.value)
    assert "not-the-secret-xyz" not in str(failure.value)


def test_secrets_never_reach_logs_errors_or_reprs(state, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    state.script = [status(503)] * 3
    errors = []
    with edge_server(state) as url:
        settings = settings_for(url, max_attempts=3)
        with PlatformClient(settings) as client:
            try:
                categories(client)
            except PlatformRequestError as exc:
                errors.append(exc)
            state.valid.clear()
            state.refuse_refresh = True
            categories(client)  # 401 -> refused refresh -> new exchange
            shown = [
                repr(client),
                str(client),
                repr(settings),
                repr(client._ready().transport),
                repr(client._ready().transport.auth),
            ]
        with PlatformClient(settings_for(url, app_secret=SecretStr(SECRET + "-wrong"))) as bad:
            try:
                categories(bad)
            except PlatformAuthError as exc:
                errors.append(exc)
    secrets = [SECRET, *state.valid, *state.refresh_tokens]
    assert len(secrets) >= 3 and len(errors) == 2 and state.exchanges == 2
    texts = [caplog.text, *shown, *(str(e) for e in errors), *(repr(e) for e in errors)]
    for text in texts:
        for secret in secrets:
            assert secret not in text


def test_a_read_response_is_freed_by_reference_counting_not_left_to_the_cyclic_collector(state):
    """A page's response and its body go as soon as the page is decoded, so bodies do not pile up between full
    collections (issue 15): nothing in the request path holds a reference cycle to a response (httpx's client bound
    each response to its stream, one)."""
    import gc

    import httpx

    def live_responses() -> int:
        return sum(isinstance(obj, httpx.Response) for obj in gc.get_objects())

    async def scenario(url: str) -> None:
        core = SourceCore(settings_for(url).client)
        try:
            await core.transport.get("/v1/categories", {}, json_body)  # the token, once
            before = live_responses()
            for _ in range(20):
                assert await core.transport.get("/v1/categories", {}, json_body) == CATEGORIES
            assert live_responses() == before
        finally:
            await core.transport.aclose()

    with edge_server(state) as url:
        gc.collect()
        gc.disable()
        try:
            asyncio.run(scenario(url))
        finally:
            gc.enable()
