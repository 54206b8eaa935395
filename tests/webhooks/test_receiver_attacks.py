"""A small run of bench/receiver_attacks.py: a receiver process with short timeouts and a small connection
cap, held by slowloris, idle (more than the cap) and Content-Length-lie connections in turn, keeps
answering good deliveries, closes the attack connections itself, and stays small."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.receiver_attacks import free_port, run_attack, start_receiver

LIMITS = {
    "LESSONSYNC_WEBHOOK_HEADER_TIMEOUT": "0.5",
    "LESSONSYNC_WEBHOOK_BODY_TIMEOUT": "0.5",
    "LESSONSYNC_WEBHOOK_MAX_CONNECTIONS": "100",
}


@pytest.mark.slow
def test_good_deliveries_keep_succeeding_under_attack(tmp_path: Path) -> None:
    port = free_port()
    receiver = start_receiver(port, tmp_path / "inbox.sqlite3", LIMITS)
    try:
        for attack in ("slowloris", "idle", "content_length_lie"):
            # 150 slowloris, 300 idle (3x the cap), 30 lying connections, for 2 s each
            result = run_attack(port, receiver.pid, attack, connections=150, seconds=2.0, good_senders=2, interval=0.02)
            assert result["good_failures"] == {}, result
            assert int(result["good_deliveries"]) > 10, result  # type: ignore[call-overload]
            assert float(result["p99_ms"]) < 2000, result  # type: ignore[arg-type]  # a loaded 2-core machine
            assert int(result["attack_connections_closed_by_server"]) > 0, result  # type: ignore[call-overload]
            assert float(result["receiver_peak_rss_mib"]) < 200, result  # type: ignore[arg-type]
    finally:
        receiver.kill()
        receiver.wait(timeout=30)
