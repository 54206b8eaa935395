"""Loading the inbox into the warehouse (pipeline/webhooks/load.py, through Warehouse.load()) on real files:
current-state rules, column layout, idempotence, a recreated inbox, failures in the middle of a load, the
lake (rebuild) and the adoption of a warehouse written by the old loader (lms.certificate_inbox_state)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from webhook_helpers import FUTURE, PAST, certificate

from pipeline.warehouse import Warehouse
from pipeline.webhooks.dead_letters import list_dead_letters
from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.load import load_certificate_events
from pipeline.webhooks.stream import high_water_mark

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


@pytest.fixture
def inbox(tmp_path: Path) -> Inbox:
    return Inbox(tmp_path / "inbox.sqlite3")


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")


def query(wh: Warehouse, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with wh.connect(read_only=True) as conn:
        return conn.execute(sql, params or []).fetchall()


def deliver(inbox: Inbox, *payloads: dict[str, Any], at: datetime = T0) -> None:
    """Each payload received one second after the previous, as the receiver would store it."""
    inbox.append([to_delivery(orjson.dumps(p), at + timedelta(seconds=n), "test") for n, p in enumerate(payloads)])


def state(wh: Warehouse, cid: str) -> tuple[str, str]:
    [row] = query(wh, "SELECT state, strftime(updated_at, '%Y-%m-%d') FROM lms.certificates WHERE id = ?", [cid])
    return row


def table_contents(wh: Warehouse) -> dict[str, list[tuple[Any, ...]]]:
    return {
        table: query(wh, f"SELECT * FROM lms.{table} ORDER BY ALL") for table in ("certificate_events", "certificates")
    }


def test_completed_then_expired_gives_two_events_and_the_expired_state(inbox: Inbox, wh: Warehouse) -> None:
    deliver(inbox, certificate("c1", FUTURE, "2026-11-01T00:00:00Z"), certificate("c1", PAST, "2026-11-05T00:00:00Z"))
    stats = load_certificate_events(wh, inbox)
    assert (stats.events_loaded, stats.completed, stats.expired, stats.hwm_after) == (2, 1, 1, 2)
    assert state(wh, "c1") == ("expired", "2026-11-05")


@pytest.mark.parametrize("separate_loads", [False, True], ids=["same load", "later load"])
def test_a_late_older_completion_never_overwrites_the_expiry(inbox: Inbox, wh: Warehouse, separate_loads: bool) -> None:
    deliver(inbox, certificate("c1", PAST, "2026-11-05T00:00:00Z"))
    if separate_loads:
        load_certificate_events(wh, inbox)
    deliver(inbox, certificate("c1", FUTURE, "2026-11-01T00:00:00Z"), at=T0 + timedelta(hours=1))
    load_certificate_events(wh, inbox)
    assert state(wh, "c1") == ("expired", "2026-11-05")
    assert query(wh, "SELECT count(*) FROM lms.certificate_events") == [(2,)]


@pytest.mark.parametrize("order", [("completed", "expired"), ("expired", "completed")])
def test_on_equal_updated_at_expired_wins_whatever_the_arrival_order(
    inbox: Inbox, wh: Warehouse, order: tuple[str, str]
) -> None:
    payloads = {"completed": certificate("c1", FUTURE), "expired": certificate("c1", PAST)}
    for n, kind in enumerate(order):  # one load per delivery: the rule must hold across loads too
        deliver(inbox, payloads[kind], at=T0 + timedelta(minutes=n))
        load_certificate_events(wh, inbox)
    assert state(wh, "c1")[0] == "expired"


def test_a_renewal_with_a_later_update_makes_it_completed_again(inbox: Inbox, wh: Warehouse) -> None:
    deliver(inbox, certificate("c1", PAST, "2026-11-05T00:00:00Z"), certificate("c1", FUTURE, "2026-11-06T00:00:00Z"))
    load_certificate_events(wh, inbox)
    assert state(wh, "c1") == ("completed", "2026-11-06")


def test_columns_follow_the_naming_rule_with_extras_as_json(inbox: Inbox, wh: Warehouse) -> None:
    payload = certificate(
        "c1",
        expires="2027-01-01T01:00:00+01:00",
        updated_at="2026-11-01T10:00:00",
        brandNew=[1, {"a": None}],
        ruleData={"name": "Excel", "tier": "gold"},
    )
    deliver(inbox, payload)
    load_certificate_events(wh, inbox)
    [row] = query(
        wh,
        "SELECT id, user_id, badge_id, expires::VARCHAR, updated_at::VARCHAR, lesson_active_ids, rule_data_name, "
        "rule_data_validity_duration_days, v, extra::VARCHAR, event_type, source, sequence "
        "FROM lms.certificate_events",
    )
    assert row == (
        "c1",
        "user-1",
        "badge-1",
        "2027-01-01 00:00:00+00",
        "2026-11-01 10:00:00+00",
        ["al-1", "al-2"],
        "Excel",
        None,
        0.0,
        '{"brandNew":[1,{"a":null}],"ruleData":{"tier":"gold"}}',
        "certificate_completed",
        "test",
        1,
    )
    types = dict(query(wh, "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'certificates'"))
    assert types["expires"] == types["first_loaded_at"] == "TIMESTAMP WITH TIME ZONE"
    assert types["extra"] == "JSON" and types["lesson_active_ids"] == "VARCHAR[]"


def test_loading_again_changes_nothing(inbox: Inbox, wh: Warehouse) -> None:
    deliver(inbox, *(certificate(f"c{n}", PAST if n % 3 == 0 else FUTURE) for n in range(20)))
    load_certificate_events(wh, inbox)
    before = table_contents(wh)
    stats = load_certificate_events(wh, inbox)
    assert (stats.events_read, stats.events_loaded, stats.hwm_before, stats.hwm_after) == (0, 0, 20, 20)
    assert table_contents(wh) == before


def test_a_recreated_inbox_with_the_same_events_changes_nothing(inbox: Inbox, wh: Warehouse, tmp_path: Path) -> None:
    deliver(inbox, certificate("c1", FUTURE), certificate("c2", PAST))
    load_certificate_events(wh, inbox)
    before = table_contents(wh)
    other = Inbox(tmp_path / "recreated.sqlite3")
    deliver(other, certificate("c1", FUTURE), certificate("c2", PAST))  # same events, new inbox id
    stats = load_certificate_events(wh, other)
    assert (stats.events_loaded, stats.duplicates_skipped, stats.hwm_after) == (0, 2, 2)
    assert table_contents(wh) == before
    assert high_water_mark(wh, other.inbox_id() or "") == 2
    assert high_water_mark(wh, inbox.inbox_id() or "") == 2  # each inbox is a stream with its own position
    streams = query(wh, "SELECT stream, position FROM lms._sync_state ORDER BY stream")
    assert sorted(streams) == sorted([(f"certificate_inbox_{i.inbox_id()}", 2) for i in (inbox, other)])


def test_small_chunks_give_the_same_tables(inbox: Inbox, tmp_path: Path) -> None:
    deliver(
        inbox,
        *(
            certificate(f"c{n % 4}", PAST if n % 5 == 0 else FUTURE, f"2026-11-{n + 1:02d}T00:00:00Z")
            for n in range(11)
        ),
    )
    one = Warehouse(tmp_path / "one" / "warehouse.duckdb", tmp_path / "one" / "lake")
    many = Warehouse(tmp_path / "many" / "warehouse.duckdb", tmp_path / "many" / "lake")
    load_certificate_events(one, inbox)
    stats = load_certificate_events(many, inbox, chunk_events=3)
    assert stats.transactions == 4
    assert len(list((tmp_path / "many" / "lake" / "_loads").glob("*.json"))) == 4  # one committed load per chunk
    compared = "SELECT * EXCLUDE (first_loaded_at, last_loaded_at) FROM lms.{} ORDER BY ALL"
    for table in ("certificate_events", "certificates"):
        assert query(one, compared.format(table)) == query(many, compared.format(table))


def test_an_event_that_no_longer_validates_is_dead_lettered_and_the_others_load(inbox: Inbox, wh: Warehouse) -> None:
    deliver(inbox, *(certificate(f"c{n}") for n in range(4)))
    with closing(sqlite3.connect(inbox.path)) as raw:  # as if the model had become stricter since receipt
        raw.execute("UPDATE events SET payload = ? WHERE sequence = 3", (b'{"_id": "c2", "_userId": 42}',))
        raw.commit()
    stats = load_certificate_events(wh, inbox, chunk_events=2)
    [letter] = stats.dead_letters
    assert (letter.sequence, letter.certificate_id, letter.field) == (3, "c2", "_userId")
    assert "inbox event 3 (certificate 'c2')" in letter.error and stats.quarantined_pending == 1
    assert high_water_mark(wh, inbox.inbox_id() or "") == 4  # past the dead letter: it waits in the inbox
    assert query(wh, "SELECT id FROM lms.certificate_events ORDER BY sequence") == [("c0",), ("c1",), ("c3",)]
    assert [d.sequence for d in list_dead_letters(inbox)] == [3]


def test_no_inbox_yet_loads_nothing_and_creates_the_tables(tmp_path: Path, wh: Warehouse) -> None:
    stats = load_certificate_events(wh, Inbox(tmp_path / "none.sqlite3"))
    assert (stats.inbox_id, stats.events_loaded) == (None, 0)
    assert query(wh, "SELECT count(*) FROM lms.certificates") == [(0,)]
