"""End to end over real HTTP: the platform simulator sends its certificate deliveries (with retries and
deliberate duplicates) to the receiver; the inbox is loaded into DuckDB and must equal the simulator's
ground truth -- every certificate, its latest payload, and completed/expired as the platform decided."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from webhook_helpers import BEARER, make_settings, serve_in_thread

from pipeline.warehouse import Warehouse
from pipeline.webhooks.load import load_certificate_events
from simulator.certificates import CertificateStore
from simulator.server import start_simulator


def _instant(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.slow
def test_simulator_deliveries_end_up_as_its_ground_truth(tmp_path: Path) -> None:
    with (
        serve_in_thread(make_settings(tmp_path)) as receiver,
        start_simulator(
            scale="tiny",
            seed=7,
            port=0,
            webhook_url=receiver.url,
            webhook_auth=f"bearer:{BEARER}",
            webhook_duplicate_rate=0.3,
        ) as simulator,
    ):
        for _ in range(4):  # ten days each: completions, and expiries of the short-lived certificates
            simulator.advance(hours=240)
        assert simulator.flush_webhooks(timeout=60)
        stats = simulator.webhook_stats()
        now_ms = simulator.world.clock_ms
        truth = {c["_id"]: c for c in simulator.ground_truth("certificates")}

    assert stats["failed"] == 0 and stats["duplicates"] > 0 and stats["by_event"].get("certificate_expired")
    assert receiver.inbox.count_events() == stats["delivered"] - stats["duplicates"]
    warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
    load_certificate_events(warehouse, receiver.inbox)
    with warehouse.connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT id, state, updated_at, expires, expiry_reminder_sent, disabled FROM lms.certificates"
        ).fetchall()
    loaded = {row[0]: row[1:] for row in rows}
    assert loaded.keys() == truth.keys()
    for cid, record in truth.items():
        expected_state = CertificateStore.event_type_of(record, now_ms).removeprefix("certificate_")
        assert loaded[cid] == (
            expected_state,
            _instant(record["updatedAt"]),
            _instant(record["expires"]),
            record["expiryReminderSent"],
            record["disabled"],
        ), cid
