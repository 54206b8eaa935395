"""The certificate inbox in a real PostgreSQL (LESSONSYNC_INBOX_URL): the same reads and loads as the SQLite
inbox, writes that commit in sequence order whatever the number of receivers, and two receiver processes
behind one inbox that lose nothing and store nothing twice while one of them is SIGKILLed; `lessonsync status`
reports its backlog as it reports the SQLite inbox's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg2
import pytest
from dagster import RunRequest, build_sensor_context

from bench.receiver_replicas import run_two_replicas
from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.certificates.sensors import certificate_inbox_tick
from pipeline.warehouse import Warehouse
from pipeline.webhooks.events import Rejected, to_delivery
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.inbox_postgres import WRITE_LOCK, PostgresInbox, redacted
from pipeline.webhooks.load import load_certificate_events

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
FUTURE, PAST = "2040-01-01T00:00:00.000Z", "2020-01-01T00:00:00.000Z"


def _certificate(cid: str, expires: str, updated_at: str = "2026-11-01T10:00:00.000Z") -> dict[str, Any]:
    return {
        "_id": cid,
        "_userId": "user-1",
        "_badgeId": "badge-1",
        "expires": expires,
        "createdAt": "2026-10-01T09:00:00.000Z",
        "updatedAt": updated_at,
    }


def _deliveries(*payloads: dict[str, Any]) -> list[Any]:
    return [to_delivery(orjson.dumps(p), T0 + timedelta(seconds=n), "test") for n, p in enumerate(payloads)]


def _loaded(wh: Warehouse) -> dict[str, list[tuple[Any, ...]]]:
    with wh.connect(read_only=True) as conn:
        return {
            "events": conn.execute(
                "SELECT event_id, event_type, received_at, source, sequence FROM lms.certificate_events ORDER BY ALL"
            ).fetchall(),
            "certificates": conn.execute(
                "SELECT id, state, last_event_id, last_event_type FROM lms.certificates ORDER BY ALL"
            ).fetchall(),
        }


def test_the_postgres_inbox_reads_and_loads_like_the_sqlite_one(postgres_url: str, tmp_path: Path) -> None:
    pg, sqlite = PostgresInbox(postgres_url), Inbox(tmp_path / "inbox.sqlite3")
    assert pg.inbox_id() is None and pg.max_sequence() == 0 and list(pg.read_events()) == []
    batch = _deliveries(
        _certificate("c1", FUTURE), _certificate("c2", PAST), _certificate("c1", PAST, "2026-11-05T00:00:00.000Z")
    )
    rejected = Rejected(T0, "test", "text/plain", 415, "not json", b"\x00raw")
    for inbox in (pg, sqlite):
        outcomes = inbox.append(batch, [rejected])
        assert [o.duplicate for o in outcomes] == [False, False, False]
        again = inbox.append(batch[:1])  # a redelivery: the stored row, not a new one
        assert again[0].duplicate and again[0].sequence == outcomes[0].sequence
    assert pg.count_events() == sqlite.count_events() == 3
    assert [(e.sequence, e.dedupe_key, e.payload) for e in pg.read_events()] == [
        (e.sequence, e.dedupe_key, e.payload) for e in sqlite.read_events()
    ]
    assert [e.sequence for e in pg.read_events(after_sequence=1, up_to_sequence=2)] == [2]
    assert [row[4:] for row in pg.read_quarantine()] == [("not json", b"\x00raw")]

    loads = {}
    for name, inbox in (("pg", pg), ("sqlite", sqlite)):
        wh = Warehouse(tmp_path / name / "warehouse.duckdb", tmp_path / name / "lake")
        stats = load_certificate_events(wh, inbox)
        assert (stats.events_loaded, stats.hwm_after) == (3, 3)
        assert load_certificate_events(wh, inbox).events_loaded == 0  # exactly once
        loads[name] = _loaded(wh)
        backlog = inbox.backlog()
        assert (backlog.depth, backlog.loaded_through, backlog.oldest_unloaded_at) == (0, 3, None)
    assert loads["pg"] == loads["sqlite"]

    pg.append(_deliveries(_certificate("c3", FUTURE)))
    backlog = pg.backlog()
    assert backlog.depth == 1 and backlog.max_sequence > 3  # PostgreSQL sequences may leave gaps: harmless
    assert backlog.oldest_unloaded_age(T0 + timedelta(seconds=30)) == 30


def test_the_sensor_reads_the_postgres_inbox_and_tags_its_backlog(postgres_url: str, tmp_path: Path) -> None:
    resource = InboxResource(path=str(tmp_path / "unused.sqlite3"), url=postgres_url)
    context = build_sensor_context(resources={"inbox": resource})
    assert "yet" in str(certificate_inbox_tick(context, resource).skip_message)  # type: ignore[union-attr]
    PostgresInbox(postgres_url).append(_deliveries(_certificate("c1", FUTURE), _certificate("c2", FUTURE)))
    request = certificate_inbox_tick(context, resource)
    assert isinstance(request, RunRequest)
    assert request.tags["lessonsync/inbox_depth"] == "2"
    assert int(request.tags["lessonsync/inbox_lag_seconds"]) >= 0
    assert postgres_url.split("@")[0].split(":")[-1] not in redacted(postgres_url)  # the password never shows


def test_event_writes_commit_one_at_a_time_in_sequence_order(postgres_url: str) -> None:
    """A transaction holding the write lock (another receiver's batch, not committed yet) makes a second
    writer wait; the second one's sequence is then above the first's, so no reader can see it first."""
    inbox = PostgresInbox(postgres_url)
    inbox.append(_deliveries(_certificate("c0", FUTURE)))  # creates the tables
    other = psycopg2.connect(postgres_url)
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            cursor.execute(
                "INSERT INTO lessonsync_inbox_events (dedupe_key, certificate_id, event_type, received_at, payload, "
                "last_received_at) VALUES ('k-first', 'c-first', 'certificate_completed', now(), '', now()) "
                "RETURNING sequence"
            )
            (first,) = cursor.fetchone()
        outcomes: list[Any] = []
        writer = threading.Thread(target=lambda: outcomes.extend(inbox.append(_deliveries(_certificate("c9", FUTURE)))))
        writer.start()
        time.sleep(0.5)
        assert writer.is_alive(), "the second writer did not wait for the first transaction"
        assert inbox.max_sequence() < first  # a reader sees neither yet
        other.commit()
        writer.join(timeout=30)
        assert outcomes and outcomes[0].sequence > first
    finally:
        other.close()


@pytest.mark.slow
def test_two_receivers_on_one_postgres_inbox_lose_nothing_and_store_once(postgres_url: str, tmp_path: Path) -> None:
    """240 deliveries from 12 senders, a third sent to both receivers at once, one receiver SIGKILLed half-way
    (its senders retry on the other), the load running all along: the warehouse holds exactly what was
    acknowledged, once."""
    result = run_two_replicas(postgres_url, tmp_path, deliveries=240, senders=12, duplicates=1 / 3)
    assert result["victim_killed"]
    assert result["acknowledged"] == 240
    assert result["lost"] == 0 and result["doubled"] == 0
    assert result["inbox_rows"] == result["inbox_distinct"] == result["warehouse_certificates"] == 240
    assert result["warehouse_events"] == 240
    assert int(result["redeliveries_counted"]) > 0  # copies sent to both were stored once and counted


def test_a_poison_event_in_the_postgres_inbox_becomes_a_dead_letter_and_can_be_discarded(
    postgres_url: str, tmp_path: Path
) -> None:
    from pipeline.webhooks.dead_letters import count_dead_letters, list_dead_letters, resolve_dead_letter
    from pipeline.webhooks.events import COMPLETED, Delivery, dedupe_key

    poison = b'{"_id":"x","creationDate":"0001-01-01T00:00:00+14:00"}'
    inbox = PostgresInbox(postgres_url)
    good = _deliveries(_certificate("c1", FUTURE), _certificate("c2", FUTURE))
    inbox.append(
        [good[0], Delivery(dedupe_key(orjson.loads(poison), COMPLETED), "x", COMPLETED, T0, "t", poison), good[1]]
    )
    wh = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
    stats = load_certificate_events(wh, inbox)
    assert stats.events_loaded == 2 and stats.quarantined == 1 and stats.quarantined_pending == 1
    [letter] = list_dead_letters(inbox)
    assert letter.sequence == 2 and letter.field == "creationDate"
    resolve_dead_letter(inbox, 2, "discarded")
    assert count_dead_letters(inbox) == 0
    assert [d.status for d in list_dead_letters(inbox, status=None)] == ["discarded"]


def test_status_reports_the_postgres_inbox_like_the_sqlite_one(postgres_url: str, tmp_path: Path) -> None:
    # The same deliveries in both inboxes, two days old: 5 loaded into the warehouse, then 20 more not loaded.
    first = datetime.now(UTC) - timedelta(days=2)
    deliveries = [
        to_delivery(orjson.dumps(_certificate(f"c{n}", FUTURE)), first + timedelta(seconds=n), "test")
        for n in range(25)
    ]
    reports = {}
    for name, url in (("pg", postgres_url), ("sqlite", None)):
        data_dir = tmp_path / name
        inbox = PostgresInbox(postgres_url) if url else Inbox(data_dir / "inbox.sqlite3")
        inbox.append(deliveries[:5])
        load_certificate_events(Warehouse(data_dir / "warehouse.duckdb", data_dir / "lake"), inbox)
        inbox.append(deliveries[5:])
        env = {**os.environ, "LESSONSYNC_DATA_DIR": str(data_dir), "DAGSTER_HOME": str(tmp_path / "no_home")}
        if url:
            env["LESSONSYNC_INBOX_URL"] = url
        result = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "status", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert redacted(postgres_url) != postgres_url and postgres_url not in result.stdout + result.stderr
        reports[name] = (result.returncode, json.loads(result.stdout), inbox.inbox_id())

    for name, (code, report, inbox_id) in reports.items():
        assert code == 1 and report["status"] == "CRITICAL", (name, report)  # an event two days old is not loaded
        assert report["inbox"]["inbox_id"] == inbox_id
        assert report["inbox"]["depth"] == 20 and report["inbox"]["loaded_up_to"] == 5, (name, report["inbox"])
        assert report["inbox"]["received_up_to"] == 25
        assert report["inbox"]["oldest_unloaded_at"] == (first + timedelta(seconds=5)).isoformat(timespec="seconds")
        certificates = {s["stream"]: s for s in report["streams"]}["certificates"]
        assert certificates["freshness"] == "STALE" and certificates["position"] == 5 and certificates["loads"] == 1
    pg_inbox, sqlite_inbox = reports["pg"][1]["inbox"], reports["sqlite"][1]["inbox"]
    assert pg_inbox["location"] == redacted(postgres_url)
    different = {"inbox_id", "location"}
    assert {k: v for k, v in pg_inbox.items() if k not in different} == {
        k: v for k, v in sqlite_inbox.items() if k not in different
    }
