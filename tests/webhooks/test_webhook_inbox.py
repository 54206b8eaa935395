"""The durable inbox behind the receiver: 200 only once an event is readable, deduplication, event-type
inference at receipt, 500 when it cannot store, and the inbox's own read/write API."""

from __future__ import annotations

import logging
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from webhook_helpers import FUTURE, PAST, RunningReceiver, certificate

from pipeline.webhooks.checkpoint import Checkpointer
from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox


def test_200_only_once_the_event_is_readable_by_another_connection(
    receiver: RunningReceiver, bearer: dict[str, str]
) -> None:
    def post_and_check(n: int) -> tuple[int, bool]:
        response = receiver.post(certificate(f"c-{n}"), headers=bearer)
        sequence = response.json()["sequence"]
        # A fresh read-only connection of another "process": the sensor's view of the inbox.
        seen = [e for e in Inbox(receiver.inbox.path).read_events(after_sequence=sequence - 1, limit=1)]
        return response.status_code, bool(seen) and seen[0].certificate_id == f"c-{n}"

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(post_and_check, range(64)))
    assert results == [(200, True)] * 64
    assert receiver.inbox.count_events() == 64


def test_identical_redelivery_is_stored_once(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    payload = certificate("c-dup")
    first = receiver.post(payload, headers=bearer).json()
    again = receiver.post(payload, headers=bearer).json()
    # Same JSON, other key order and spacing: still the same delivery.
    reformatted = orjson.dumps(dict(reversed(list(payload.items())))).replace(b",", b", ")
    third = receiver.post(content=reformatted, headers=bearer).json()
    assert first["status"] == "stored" and again["status"] == third["status"] == "duplicate"
    assert first["sequence"] == again["sequence"] == third["sequence"]
    assert receiver.inbox.count_events() == 1
    with closing(sqlite3.connect(receiver.inbox.path)) as conn:
        assert conn.execute("SELECT redeliveries FROM events").fetchone() == (2,)


def test_changed_payload_for_the_same_id_is_a_new_event(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    receiver.post(certificate("c1", updated_at="2026-11-01T10:00:00.000Z"), headers=bearer)
    receiver.post(certificate("c1", updated_at="2026-11-02T10:00:00.000Z", disabled=True), headers=bearer)
    assert [e.certificate_id for e in receiver.inbox.read_events()] == ["c1", "c1"]


def test_completed_then_expired_for_one_id_are_two_events(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    """The very same bytes, before and after `expires`: the type is inferred at receipt, and the
    deduplication key includes it, so the expiry is not taken for a redelivery of the completion."""
    expires = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat().replace("+00:00", "Z")
    body = orjson.dumps(certificate("c-life", expires=expires))
    completed = receiver.post(content=body, headers=bearer).json()
    time.sleep(max(0.0, (datetime.fromisoformat(expires) - datetime.now(UTC)).total_seconds()) + 0.1)
    expired = receiver.post(content=body, headers=bearer).json()
    assert (completed["event_type"], expired["event_type"]) == ("certificate_completed", "certificate_expired")
    assert completed["status"] == expired["status"] == "stored"
    assert [(e.certificate_id, e.event_type) for e in receiver.inbox.read_events()] == [
        ("c-life", "certificate_completed"),
        ("c-life", "certificate_expired"),
    ]


def test_out_of_order_deliveries_are_all_kept_in_arrival_order(
    receiver: RunningReceiver, bearer: dict[str, str]
) -> None:
    """The expiry arrives before the completion (a retried completion): both are stored, each once."""
    expired = certificate("c-ooo", expires=PAST, updated_at="2026-11-10T00:00:00.000Z")
    completed = certificate("c-ooo", expires=FUTURE, updated_at="2026-11-01T00:00:00.000Z")
    for payload in (expired, completed, expired, completed):
        assert receiver.post(payload, headers=bearer).status_code == 200
    events = list(receiver.inbox.read_events())
    assert [e.event_type for e in events] == ["certificate_expired", "certificate_completed"]
    assert [e.sequence for e in events] == sorted(e.sequence for e in events)


def _add_failing_trigger(inbox: Inbox, table: str) -> None:
    with closing(sqlite3.connect(inbox.path)) as conn:
        conn.execute(
            f"CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'storage refused by test trigger'); END"
        )
        conn.commit()


def _drop_trigger(inbox: Inbox, table: str) -> None:
    with closing(sqlite3.connect(inbox.path)) as conn:
        conn.execute(f"DROP TRIGGER refuse_{table}")
        conn.commit()


def test_500_when_the_inbox_cannot_store_then_the_retry_succeeds(
    receiver: RunningReceiver, bearer: dict[str, str]
) -> None:
    _add_failing_trigger(receiver.inbox, "events")
    response = receiver.post(certificate("c-retry"), headers=bearer)
    assert response.status_code == 500
    assert response.json()["error"] == "storage_failed" and "retry" in response.json()["message"]
    assert receiver.inbox.count_events() == 0
    _drop_trigger(receiver.inbox, "events")
    assert receiver.post(certificate("c-retry"), headers=bearer).json()["status"] == "stored"


def test_500_when_a_rejected_body_cannot_be_quarantined(receiver: RunningReceiver, bearer: dict[str, str]) -> None:
    """Answering 400 without keeping the body would lose it: the platform must retry instead."""
    _add_failing_trigger(receiver.inbox, "quarantine")
    assert receiver.post(content=b"{oops", headers=bearer).status_code == 500
    _drop_trigger(receiver.inbox, "quarantine")
    assert receiver.post(content=b"{oops", headers=bearer).status_code == 400
    assert receiver.inbox.count_quarantined() == 1


def _delivery(cid: str, at: datetime, **fields: object) -> object:
    return to_delivery(orjson.dumps(certificate(cid, **fields)), at, "unit")


def test_one_batch_with_redeliveries_inside_and_before_it(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    now = datetime.now(UTC)
    [old] = inbox.append([_delivery("a", now)])
    batch = [_delivery("b", now), _delivery("a", now), _delivery("b", now), _delivery("c", now)]
    outcomes = inbox.append(batch)  # type: ignore[arg-type]
    assert [(o.sequence == old.sequence, o.duplicate) for o in outcomes] == [
        (False, False),
        (True, True),
        (False, True),
        (False, False),
    ]
    assert outcomes[0].sequence == outcomes[2].sequence
    assert [e.certificate_id for e in inbox.read_events()] == ["a", "b", "c"]


def test_reading_pages_in_sequence_order(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    now = datetime.now(UTC)
    inbox.append([_delivery(f"c{n}", now) for n in range(10)])  # type: ignore[misc]
    assert inbox.max_sequence() == 10
    assert [e.sequence for e in inbox.read_events(after_sequence=3, limit=4)] == [4, 5, 6, 7]
    assert [e.sequence for e in inbox.read_events(after_sequence=7, up_to_sequence=9)] == [8, 9]


def test_a_missing_inbox_reads_as_empty_and_is_not_created(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "absent" / "inbox.sqlite3")
    assert (inbox.inbox_id(), inbox.max_sequence(), list(inbox.read_events())) == (None, 0, [])
    assert not inbox.path.parent.exists()


def test_a_failing_checkpoint_is_said_once_per_streak_and_never_creates_the_inbox(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The receiver checkpoints every half second: an inbox whose file is gone fails every time, which is one WARNING
    line with the error (no traceback), not one a checkpoint; the file is not made anew, empty, beside the writer's;
    the streak's end is one line too."""
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    inbox.append([_delivery("a", datetime.now(UTC))])  # type: ignore[list-item]
    checkpointer = Checkpointer(inbox)
    assert checkpointer.checkpoint("PASSIVE")
    inbox.path.unlink()
    with caplog.at_level(logging.WARNING, logger="pipeline.webhooks.checkpoint"):
        assert [checkpointer.checkpoint("PASSIVE") for _ in range(5)] == [False] * 5
        assert not inbox.path.exists()
        failed = [r for r in caplog.records if "failed" in r.getMessage()]
        assert len(failed) == 1 and failed[0].exc_info is None
        assert "OperationalError: unable to open database file" in failed[0].getMessage()
        assert str(inbox.path) in failed[0].getMessage()
        inbox.append([_delivery("b", datetime.now(UTC))])  # type: ignore[list-item]
        assert checkpointer.checkpoint("PASSIVE")
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        failed[0].getMessage().split(",")[0],
        "inbox WAL checkpoint succeeds again",
    ]
