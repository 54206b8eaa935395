"""The receiver's Prometheus metrics, served at GET /metrics in the text exposition format.

Each app has its own registry (several receivers may live in one test process). The inbox's backlog (depth
and the age of the oldest event not yet loaded) is read from the inbox when scraped, from the position the
load records there after each committed chunk."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from pipeline.webhooks.inbox_backend import InboxBackend

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0)


class InboxBacklogCollector(Collector):
    """Inbox depth and lag, read at scrape time; a failed read reports itself instead of failing the scrape."""

    def __init__(self, inbox: InboxBackend) -> None:
        self._inbox = inbox

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily("lessonsync_inbox_up", "1 if the inbox could be read for this scrape")
        depth = GaugeMetricFamily("lessonsync_inbox_depth", "Inbox events not yet loaded into the warehouse")
        age = GaugeMetricFamily(
            "lessonsync_inbox_oldest_unloaded_age_seconds", "Age of the oldest inbox event not yet loaded (0: none)"
        )
        last = GaugeMetricFamily("lessonsync_inbox_max_sequence", "Highest inbox sequence stored")
        try:
            backlog = self._inbox.backlog()
        except Exception:  # noqa: BLE001 - the scrape still answers, with inbox_up 0
            log.warning("metrics: could not read the inbox backlog", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        depth.add_metric([], backlog.depth)
        age.add_metric([], backlog.oldest_unloaded_age(datetime.now(UTC)))
        last.add_metric([], backlog.max_sequence)
        yield from (up, depth, age, last)


class ReceiverMetrics:
    """Counters and the latency histogram the receiver updates, and the registry /metrics serves."""

    def __init__(self, inbox: InboxBackend) -> None:
        self.registry = CollectorRegistry()
        self.deliveries = Counter(
            "lessonsync_webhook_deliveries",
            "Webhook requests to the receiver's POST path, by outcome and HTTP status",
            ["outcome", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "lessonsync_webhook_request_duration_seconds",
            "Time from the request head to the answer, for the receiver's POST path",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.closed = Counter(
            "lessonsync_webhook_connections_closed",
            "Connections the server closed to protect itself, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.registry.register(InboxBacklogCollector(inbox))

    def observe(self, outcome: str, status: int, started: float) -> None:
        self.deliveries.labels(outcome, str(status)).inc()
        self.latency.observe(time.perf_counter() - started)

    def connection_closed(self, reason: str) -> None:
        self.closed.labels(reason).inc()
