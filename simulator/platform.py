"""Everything one running simulator holds: the world, tokens, fault state and counters. The ASGI app
reaches it as `request.app.state.platform`; `SimulatorHandle` wraps it for tests."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from simulator import params
from simulator.auth import TokenService
from simulator.config import SimulatorConfig
from simulator.faults import FaultSpec, parse_faults
from simulator.rng import generator
from simulator.timeutil import MS_PER_MINUTE
from simulator.world import World

REQUEST_LOG_SIZE = 100_000  # the most recent /v1 requests kept in the log (a few MiB)


@dataclass(frozen=True)
class LoggedRequest:
    """One /v1 request as the server saw it: its raw path and query, and when it arrived and was answered
    (monotonic seconds), so tests can tell which requests overlapped."""

    path: str
    arrived: float
    answered: float


class Stats:
    """Counters shared by the event loop and the caller's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # "GET /v1/active-lessons" -> count
        self.statuses: Counter[str] = Counter()  # "200" -> count
        self.faults: Counter[str] = Counter()  # "5xx", "429", "truncated", "drift_pages", "drift_moves", ...
        self.in_flight = 0  # /v1 requests arrived and not yet answered
        self.max_in_flight = 0
        self.log: deque[LoggedRequest] = deque(maxlen=REQUEST_LOG_SIZE)

    def arrived(self) -> float:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return time.monotonic()

    def answered(self, path: str, arrived: float) -> None:
        with self._lock:
            self.in_flight -= 1
            self.log.append(LoggedRequest(path, arrived, time.monotonic()))

    def request_log(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self.log)

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[route] += 1
            self.statuses[str(status)] += 1

    def fault(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.faults[name] += amount

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "statuses": dict(self.statuses),
                "faults": dict(self.faults),
                "max_in_flight": self.max_in_flight,
            }


class FaultState:
    """The active FaultSpec (replaceable at runtime) and seeded randomness for injecting it."""

    def __init__(self, spec: FaultSpec, seed: int) -> None:
        self._spec = spec
        self._outage_until = time.monotonic() + spec.outage_s
        self.rng = random.Random(f"faults:{seed}")
        self.drift_rng = generator(seed, 9)
        self._api_requests = 0
        self._lock = threading.Lock()

    @property
    def spec(self) -> FaultSpec:
        return self._spec

    @spec.setter
    def spec(self, spec: FaultSpec) -> None:
        # the outage window starts when the spec is set (a platform deploy starting now), on the wall clock
        self._spec = spec
        self._outage_until = time.monotonic() + spec.outage_s

    def in_outage(self) -> bool:
        return time.monotonic() < self._outage_until

    def next_api_request(self) -> int:
        with self._lock:
            self._api_requests += 1
            return self._api_requests


class Platform:
    def __init__(self, config: SimulatorConfig, world: World | None = None) -> None:
        self.config = config
        self.world = world or World(config)
        self.faults = FaultState(parse_faults(config.faults), config.seed)
        self.stats = Stats()
        self.tokens = TokenService(
            config.app_secret,
            self.world.owner_id,
            access_ttl=lambda: self.faults.spec.token_ttl or config.token_ttl_seconds,
            refresh_ttl=config.refresh_ttl_seconds,
        )
        self.webhooks: Any = None  # WebhookSender when a webhook URL is configured

    def set_faults(self, spec: str | FaultSpec | None) -> FaultSpec:
        self.faults.spec = parse_faults(spec)
        return self.faults.spec

    def page(self, page_size: str | None, page_number: str | None) -> params.Page:
        return params.page(
            page_size,
            page_number,
            first_page=self.config.first_page,
            default_size=self.config.default_page_size,
            max_size=self.config.max_page_size,
        )

    def maybe_drift(self, *, user: int | None = None, lesson: int | None = None) -> None:
        """With probability `drift`, records of the listed collection change before the page is cut."""
        if self.faults.spec.drift and self.faults.rng.random() < self.faults.spec.drift:
            moved = self.world.drift(self.faults.drift_rng, user=user, lesson=lesson)
            self.stats.fault("drift_pages")
            self.stats.fault("drift_moves", moved)

    def visible_until(self) -> int | None:
        """Listings show active lessons with lastDate at or before this instant (ms); None: all of them."""
        lag = self.faults.spec.read_lag_min
        return None if not lag else self.world.clock_ms - round(lag * MS_PER_MINUTE)

    def stats_snapshot(self) -> dict[str, Any]:
        snapshot = self.stats.snapshot()
        snapshot["tokens"] = {
            "issued": self.tokens.issued,
            "refreshed": self.tokens.refreshed,
            "rejected": self.tokens.rejected,
        }
        snapshot["faults_spec"] = str(self.faults.spec)
        return snapshot
