"""Retry policy of the transport, built on tenacity: which failures are retried and how long to wait.

Retried: 429, 5xx, timeouts, connection errors, and 200 bodies that are not complete JSON. Waits are
exponential with jitter (0.1 s, 0.2 s, 0.4 s... + up to 0.1 s), capped by settings.retry_max_wait. A
Retry-After hint (seconds or HTTP date) is honoured up to that cap; the exponential backoff is its floor,
so `Retry-After: 0` cannot make us spin.

A request retries until settings.retry_budget seconds have passed since its first try (or max_attempts
tries, a bound the budget normally reaches first): an outage shorter than the budget is ridden out. The
last wait is shortened so that the final try happens at the end of the budget, not after it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from email.utils import parsedate_to_datetime

from tenacity import RetryCallState, stop_after_attempt, stop_after_delay, wait_exponential_jitter
from tenacity.stop import stop_base
from tenacity.wait import wait_base

FIRST_WAIT = 0.1  # seconds before the first retry; doubles each time


def retry_after_seconds(value: str | None, server_now: datetime | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date); None when absent/unreadable.

    An HTTP-date is compared with both our clock and the server's (its Date header), and the shorter
    delay wins: a skewed or simulated server clock must not turn "in one second" into days (the cap
    would still bound it), and a retry that comes too early is only one more bounded attempt.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delays = [(when - now).total_seconds() for now in (datetime.now(UTC), server_now) if now is not None]
    return max(0.0, min(delays))


@lru_cache(maxsize=64)  # every response carries one, and it changes once a second at most
def parse_http_date(value: str | None) -> datetime | None:
    """A Date header as an aware datetime, None when absent or unreadable."""
    if not value:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class RetryAfterOrBackoff(wait_base):
    """max(Retry-After hint, exponential backoff with jitter), never more than `cap` seconds."""

    def __init__(self, cap: float, budget: float | None = None) -> None:
        self._cap = cap
        self._budget = budget
        self._backoff = wait_exponential_jitter(multiplier=FIRST_WAIT, max=cap, exp_base=2, jitter=FIRST_WAIT)

    def __call__(self, retry_state: RetryCallState) -> float:
        backoff = self._backoff(retry_state)
        outcome = retry_state.outcome
        hint = getattr(outcome.exception(), "retry_after", None) if outcome is not None else None
        wait = min(self._cap, max(hint or 0.0, backoff))
        if self._budget is not None:  # never sleep past the budget: the last try comes as it ends
            wait = min(wait, max(0.0, self._budget - retry_state.seconds_since_start))
        return wait


def stop_when_spent(budget: float, max_attempts: int) -> stop_base:
    """Stop retrying once `budget` seconds have passed since the first try, or after `max_attempts` tries."""
    return stop_after_delay(budget) | stop_after_attempt(max_attempts)
