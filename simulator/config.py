"""What a simulator instance serves: seed, scale, pagination style, credentials, faults and webhooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from simulator.faults import FaultSpec, parse_faults
from simulator.newfields import NewField, parse_new_fields
from simulator.webhooks import auth_headers

ScaleName = Literal["tiny", "small", "medium", "large"]
Order = Literal["last_date", "key"]

# Fixed so that a seed alone decides every record (lastDate included); override with `start=`.
DEFAULT_START = datetime(2026, 11, 1, tzinfo=UTC)
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
# The secret POST /v1/token accepts unless told otherwise; not a real credential. LessonSync's own default
# (pipeline/settings.py) has the same value, so `lessonsync simulate` and `lessonsync sync` pair up with no
# setting; the demo stack passes its secret to both sides explicitly.
DEFAULT_APP_SECRET = "lessonsync-demo-secret"


@dataclass(frozen=True)
class ScaleProfile:
    """How many records of each kind a scale starts with (answers follow from active lessons)."""

    users: int
    lessons: int
    active_lessons: int
    groups: int
    categories: int
    sessions: int


SCALES: dict[str, ScaleProfile] = {
    "tiny": ScaleProfile(users=48, lessons=12, active_lessons=300, groups=20, categories=5, sessions=8),
    "small": ScaleProfile(users=1_500, lessons=120, active_lessons=20_000, groups=60, categories=12, sessions=80),
    "medium": ScaleProfile(users=12_000, lessons=600, active_lessons=200_000, groups=250, categories=25, sessions=300),
    "large": ScaleProfile(
        users=60_000, lessons=2_000, active_lessons=1_000_000, groups=1_000, categories=40, sessions=1_000
    ),
}


@dataclass(frozen=True)
class SimulatorConfig:
    """Everything that decides what the simulator serves. Same config (and same calls) -> same data."""

    seed: int = 42
    scale: ScaleName = "tiny"
    first_page: int = 1  # pageNumber of the first page: 0 or 1
    faults: FaultSpec | str = ""
    app_secret: str = DEFAULT_APP_SECRET
    token_ttl_seconds: float = 3600.0  # access-token lifetime on the WALL clock
    refresh_ttl_seconds: float = 86_400.0  # refresh-token lifetime on the wall clock; single use
    webhook_url: str | None = None
    webhook_auth: str | None = None  # "bearer:TOKEN" | "basic:USER:PASS" | "header:NAME:VALUE"
    webhook_source: str = "lessonsync-simulator"
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port
    order: Order = "last_date"
    start: datetime = DEFAULT_START  # simulated clock at startup; history lies before it
    default_page_size: int = DEFAULT_PAGE_SIZE
    max_page_size: int = MAX_PAGE_SIZE  # a larger pageSize is answered 400, never silently clamped
    webhook_max_attempts: int = 8
    webhook_backoff_seconds: float = 0.05  # first retry delay; doubles per attempt, capped at 2 s
    webhook_duplicate_rate: float = 0.05
    # fields the platform begins to send after an advance (newfields.py), as NewField, tuples or "resource:name:kind"
    new_fields: Sequence[NewField | tuple[Any, ...] | str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "new_fields", parse_new_fields(self.new_fields))  # frozen: normalized once
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r} is unknown: choose one of {', '.join(SCALES)}")
        if self.first_page not in (0, 1):
            raise ValueError(f"first_page must be 0 or 1, got {self.first_page!r}")
        if self.order not in ("last_date", "key"):
            raise ValueError(f"order must be 'last_date' or 'key', got {self.order!r}")
        if self.start.tzinfo is None:
            raise ValueError("start must be timezone-aware (e.g. datetime(..., tzinfo=UTC))")
        if not 1 <= self.default_page_size <= self.max_page_size:
            raise ValueError("default_page_size must be between 1 and max_page_size")
        if self.token_ttl_seconds <= 0 or self.refresh_ttl_seconds <= 0:
            raise ValueError("token lifetimes must be positive numbers of seconds")
        if (self.webhook_auth is not None) and not self.webhook_url:
            raise ValueError("webhook_auth is set but webhook_url is not: give both or neither")
        auth_headers(self.webhook_auth)  # a malformed credential spec fails here, not on the first delivery
        parse_faults(self.faults)

    @property
    def profile(self) -> ScaleProfile:
        return SCALES[self.scale]

    def __repr__(self) -> str:  # the app secret and webhook credential never reach logs through a repr
        return (
            f"SimulatorConfig(seed={self.seed}, scale={self.scale!r}, first_page={self.first_page}, "
            f"order={self.order!r}, faults={str(self.faults)!r}, new_fields={len(self.new_fields)}, "
            f"webhook_url={redact_url(self.webhook_url)!r}, "
            f"app_secret='***', webhook_auth={'***' if self.webhook_auth else None})"
        )


def redact_url(url: str | None) -> str | None:
    """The URL without any user:password part, for logs."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
