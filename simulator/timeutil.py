"""Instants are int64 milliseconds since the Unix epoch inside the simulator; the API speaks ISO 8601."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import format_datetime

import numpy as np

from simulator.fixedwidth import iso_bytes, supported

MS_PER_SECOND = 1_000
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000
MS_PER_DAY = 86_400_000


def to_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError(f"{moment!r} has no timezone; the simulator only handles aware instants")
    return int(round(moment.timestamp() * 1000))


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def iso(ms: int) -> str:
    """`2026-11-01T08:30:00.000Z`: millisecond precision, always UTC with a Z."""
    seconds, millis = divmod(int(ms), 1000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{millis:03d}Z"


def iso_many(ms: np.ndarray) -> list[str]:
    """Vectorised `iso` for a page of instants."""
    if len(ms) == 0:
        return []
    if supported(ms):
        return [text.decode() for text in iso_bytes(ms)]
    return np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms", timezone="UTC").tolist()


def parse_instant(text: str, *, name: str) -> int:
    """ISO 8601 with an offset or Z -> ms. Raises ValueError with a message fit for a 400."""
    candidate = text.strip()
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        hint = ""
        if " " in candidate:
            hint = " (an unencoded '+' in a query string arrives as a space: percent-encode it as %2B)"
        raise ValueError(f"{name}={text!r} is not an ISO 8601 date-time such as 2026-11-01T08:30:00Z{hint}") from None
    if moment.tzinfo is None:
        raise ValueError(f"{name}={text!r} has no UTC offset: add Z or an offset such as +01:00")
    return to_ms(moment)


def http_date(ms: int) -> str:
    """RFC 9110 IMF-fixdate, e.g. `Sun, 01 Nov 2026 08:30:00 GMT` (for Date and Retry-After headers)."""
    return format_datetime(from_ms(ms), usegmt=True)
