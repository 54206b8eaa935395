"""Run the simulator: uvicorn on a background thread (tests, demo) via `start_simulator`, with a
handle exposing the simulated clock, faults, ground truth, counters and webhook state."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from simulator.app import build_app
from simulator.certificates import CertificateEvent, CertificateStore
from simulator.config import SimulatorConfig
from simulator.faults import FaultSpec
from simulator.groundtruth import ground_truth, plant_invalid
from simulator.platform import LoggedRequest, Platform
from simulator.serving import ThreadedServer
from simulator.webhooks import WebhookSender
from simulator.world import World

log = logging.getLogger("simulator")


def build_platform(config: SimulatorConfig) -> Platform:
    """World + tokens + faults, and the webhook sender (already fed the existing certificates) if configured."""
    platform = Platform(config)
    if config.webhook_url:
        sender = WebhookSender(
            config.webhook_url,
            config.webhook_auth,
            config.webhook_source,
            seed=config.seed,
            max_attempts=config.webhook_max_attempts,
            backoff_seconds=config.webhook_backoff_seconds,
            duplicate_rate=config.webhook_duplicate_rate,
        )
        world = platform.world
        with world.lock:
            now = world.clock_ms
            backlog = [
                CertificateEvent(CertificateStore.event_type_of(c, now), now, c) for c in world.certificates.current()
            ]
            sender.enqueue(backlog)  # certificates earned before the receiver was known: delivered once at start
            world.subscribe(sender.enqueue)
        platform.webhooks = sender
    return platform


# Date comes from the simulated clock (middleware), so uvicorn's own wall-clock Date is off.
UVICORN_OPTIONS = {"date_header": False, "server_header": False, "timeout_keep_alive": 30}


class SimulatorHandle:
    def __init__(self, platform: Platform, server: ThreadedServer) -> None:
        self.platform = platform
        self._server = server
        self.base_url = server.base_url

    def __repr__(self) -> str:
        return f"SimulatorHandle(base_url={self.base_url!r}, config={self.platform.config!r})"

    @property
    def world(self) -> World:
        return self.platform.world

    @property
    def config(self) -> SimulatorConfig:
        return self.platform.config

    def now(self) -> datetime:
        return self.world.now()

    def advance(self, *, hours: float = 0, minutes: float = 0) -> dict[str, int]:
        """Same as POST /_sim/advance: moves the simulated clock and returns counts of what happened."""
        return self.world.advance(hours=hours, minutes=minutes)

    def set_faults(self, spec: str | FaultSpec | None) -> FaultSpec:
        return self.platform.set_faults(spec)

    def ground_truth(self, resource: str) -> Iterator[dict[str, Any]]:
        return ground_truth(self.world, resource)

    def plant_invalid(
        self, resource: str, field: str, value: Any, *, index: int | None = None, touch: bool = False
    ) -> dict[str, Any]:
        return plant_invalid(self.world, resource, field, value, index=index, touch=touch)

    def callback_token(self, user_id: str, lesson_id: str) -> str:
        return self.world.callback_token(user_id, lesson_id)

    def stats(self) -> dict[str, Any]:
        return self.platform.stats_snapshot()

    def request_log(self) -> list[LoggedRequest]:
        """The most recent /v1 requests (up to REQUEST_LOG_SIZE): path with query, arrival, answer."""
        return self.platform.stats.request_log()

    def flush_webhooks(self, timeout: float = 30.0) -> bool:
        return True if self.platform.webhooks is None else self.platform.webhooks.flush(timeout)

    def webhook_stats(self) -> dict[str, Any]:
        return {} if self.platform.webhooks is None else self.platform.webhooks.stats()

    def stop(self) -> None:
        self._server.stop()
        if self.platform.webhooks is not None:
            self.platform.webhooks.close()


def launch(config: SimulatorConfig | None = None, **overrides: Any) -> SimulatorHandle:
    """Start a simulator on a background thread and return once it accepts connections."""
    config = dataclasses.replace(config or SimulatorConfig(), **overrides)
    platform = build_platform(config)
    server = ThreadedServer(build_app(platform), config.host, config.port, name="simulator", **UVICORN_OPTIONS)
    handle = SimulatorHandle(platform, server.start())
    log.info(
        "simulator listening on %s (seed %s, scale %s, %s)",
        handle.base_url,
        config.seed,
        config.scale,
        platform.world.counts(),
    )
    return handle


@contextmanager
def start_simulator(config: SimulatorConfig | None = None, **overrides: Any) -> Iterator[SimulatorHandle]:
    handle = launch(config, **overrides)
    try:
        yield handle
    finally:
        handle.stop()
