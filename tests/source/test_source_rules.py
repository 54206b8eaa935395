"""Pure rules of the client: first-page probe, path encoding, updatedSince, Retry-After, token lifetime."""

import asyncio
import base64
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from types import SimpleNamespace

import jwt
import pytest

from pipeline.source.auth import refresh_margin, token_lifetime, unverified_claims
from pipeline.source.fetching import first_page_from_probe
from pipeline.source.paging import encode_segment, fill_path, format_updated_since
from pipeline.source.transport import RetryAfterOrBackoff, retry_after_seconds


@pytest.mark.parametrize(
    ("page0", "page1", "first"),
    [
        (None, [{"k": 1}], 1),  # 0 rejected
        ([], [{"k": 1}], 1),  # 0 empty, 1 has data
        ([{"k": 1}], [{"k": 1}], 1),  # 0 read as 1
        ([{"k": 1}], [{"k": 2}], 0),  # two different pages
        ([{"k": 1}], [], 0),  # one record on a 0-based API
        ([], [], 0),  # nothing to tell: repeat rather than skip
    ],
)
def test_first_page_rule(page0, page1, first):
    assert first_page_from_probe(page0, page1) == first


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("a/b", "a%2Fb"),
        ("a?b", "a%3Fb"),
        ("a#b", "a%23b"),
        ("a b", "a%20b"),
        ("50%", "50%25"),
        ("é", "%C3%A9"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a.b", "a.b"),
    ],
)
def test_path_segments_are_percent_encoded(value, encoded):
    assert encode_segment(value) == encoded


def test_fill_path_and_empty_ids():
    assert (
        fill_path("/v1/users/{user_id}/lessons/{lesson_id}/answers", {"user_id": "u/1", "lesson_id": "l?"})
        == "/v1/users/u%2F1/lessons/l%3F/answers"
    )
    with pytest.raises(ValueError, match="empty id"):
        fill_path("/v1/groups/{group_id}", {"group_id": ""})


def test_updated_since_formats():
    instant = datetime(2026, 11, 1, 14, tzinfo=timezone(timedelta(hours=2)))
    assert format_updated_since(instant) == "2026-11-01T12:00:00+00:00"
    assert format_updated_since(instant, "iso8601-z") == "2026-11-01T12:00:00Z"
    assert format_updated_since(instant, "epoch-ms") == str(int(instant.timestamp() * 1000))
    with pytest.raises(ValueError, match="timezone-aware"):
        format_updated_since(datetime(2026, 11, 1))


def test_retry_after_seconds_and_http_dates():
    local = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    assert retry_after_seconds("3", local) == 3.0
    assert retry_after_seconds("0", local) == 0.0
    in_7s = format_datetime(local + timedelta(seconds=7), usegmt=True)
    assert 6.0 <= retry_after_seconds(in_7s, local) <= 7.0  # server and we agree
    assert 6.0 <= retry_after_seconds(in_7s, local - timedelta(days=21)) <= 8.0  # simulated server clock
    assert retry_after_seconds(in_7s, local + timedelta(seconds=5)) == 2.0  # server clock ahead of ours
    assert retry_after_seconds(format_datetime(local - timedelta(hours=1), usegmt=True), local) == 0.0
    assert retry_after_seconds("soon", local) is None
    assert retry_after_seconds(None, local) is None


def _state(attempt, hint):
    error = SimpleNamespace(retry_after=hint)
    outcome = SimpleNamespace(exception=lambda: error)
    return SimpleNamespace(attempt_number=attempt, outcome=outcome)


def test_waits_honour_retry_after_with_a_backoff_floor_and_a_cap():
    wait = RetryAfterOrBackoff(cap=5.0)
    assert 0.1 <= wait(_state(1, 0.0)) <= 0.2  # Retry-After: 0 still waits
    assert 0.4 <= wait(_state(3, 0.0)) <= 0.5
    assert wait(_state(1, 2.0)) == 2.0
    assert wait(_state(1, 3600.0)) == 5.0
    assert wait(_state(30, None)) == 5.0


def test_token_lifetime_from_unverified_jwt_and_nothing_from_what_is_not_one():
    key = "a-test-signing-key-of-32-bytes-or-more"
    token = jwt.encode({"exp": 1_000_030, "iat": 1_000_000, "sub": "x"}, key, algorithm="HS256")
    assert token_lifetime(token) == 30
    assert token_lifetime("opaque-token") is None
    unpadded = jwt.encode({"exp": 2_000_000_000, "sub": "a-subject-of-odd-length"}, key, algorithm="HS256")
    assert len(unpadded.split(".")[1]) % 4 != 0  # base64url without its padding, as JWTs are written
    assert unverified_claims(unpadded) == {"exp": 2_000_000_000, "sub": "a-subject-of-odd-length"}
    assert token_lifetime(unpadded) is not None and token_lifetime(unpadded) > 0  # exp - now, with no iat
    not_an_object = "e30." + base64.urlsafe_b64encode(b"[1, 2]").decode().rstrip("=") + ".sig"
    for malformed in ("a.b", "a.b.c.d", "x.%%%.y", "x.bm90IGpzb24.y", "x.\u00e9t\u00e9.y", not_an_object, ""):
        assert unverified_claims(malformed) is None, malformed
        assert token_lifetime(malformed) is None, malformed
    expired_before_issued = jwt.encode({"exp": 1_000_000, "iat": 1_000_030}, key, algorithm="HS256")
    assert token_lifetime(expired_before_issued) is None
    assert refresh_margin(30) == 6 and refresh_margin(3600) == 30 and refresh_margin(1) == 0.2


def test_run_pool_surfaces_the_first_real_error():
    from pipeline.source.sweeps import run_pool

    done = []

    async def work(item):
        if item == 3:
            raise KeyError("three")
        done.append(item)

    with pytest.raises(KeyError, match="three"):
        asyncio.run(run_pool(range(10), work, 2))


def test_drift_hits_count_every_change_in_scope_whatever_its_lastdate():
    """Whether a change happened while a request was in flight cannot be told from lastDate when the Date
    header and the lastDate clock disagree: every change in a request's scope counts."""
    from pipeline.source.answers import Changes, PlannedRequest

    t = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    baseline = {("o", "u1", "L1", t - timedelta(seconds=1))}
    after = baseline | {("o", "u2", "L1", t - timedelta(hours=2)), ("o", "u3", "L2", None)}
    changes = Changes(after, baseline)
    lesson_1 = PlannedRequest("answers_by_lesson", (("lesson_id", "L1"),), 5)
    lesson_2 = PlannedRequest("answers_by_lesson", (("lesson_id", "L2"),), 5)
    user_1 = PlannedRequest("answers_by_user", (("user_id", "u1"),), 5)
    user_2 = PlannedRequest("answers_by_user", (("user_id", "u2"),), 5)
    pair = PlannedRequest("answers_by_user_lesson", (("user_id", "u2"), ("lesson_id", "L1")), 1)
    assert changes.count == 2
    assert changes.hits(lesson_1) == 1 and changes.hits(lesson_2) == 1 and changes.hits(user_2) == 1
    assert changes.hits(user_1) == 0 and changes.hits(pair) == 0
