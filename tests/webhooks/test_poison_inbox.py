"""No poison message in the inbox: one stored event the loader cannot read (here a date-time that overflows once
converted to UTC, as receivers before the receipt checks stored it) among 299 good ones. The real certificates
asset loads the 299, quarantines the one as a dead letter named by sequence and field, and succeeds with a
warning and a count in its metadata; `lessonsync status` shows it, `lessonsync inbox` lists, replays and
discards dead letters."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import orjson
from dagster import DagsterInstance, materialize
from webhook_helpers import certificate

from pipeline.defs.certificates.assets import certificates
from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.resources import WarehouseResource
from pipeline.webhooks.dead_letters import list_dead_letters
from pipeline.webhooks.events import COMPLETED, Delivery, dedupe_key, to_delivery
from pipeline.webhooks.inbox import Inbox

LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))
POISON = b'{"_id":"x","creationDate":"0001-01-01T00:00:00+14:00"}'
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def poisoned_inbox(data_dir: Path, good: int = 299, at: int = 150) -> Inbox:
    """`good` deliveries with the poison stored as event `at` + 1 (what a receiver without the receipt checks
    answered 200 "stored")."""
    inbox = Inbox(data_dir / "inbox.sqlite3")
    deliveries = [to_delivery(orjson.dumps(certificate(f"c{n}")), T0 + timedelta(seconds=n), "t") for n in range(good)]
    poison = Delivery(dedupe_key(orjson.loads(POISON), COMPLETED), "x", COMPLETED, T0, "t", POISON)
    inbox.append([*deliveries[:at], poison, *deliveries[at:]])
    return inbox


def run_asset(data_dir: Path, inbox: Inbox, instance: DagsterInstance):
    return materialize(
        [certificates],
        resources={
            "warehouse": WarehouseResource(data_dir=str(data_dir)),
            "inbox": InboxResource(path=str(inbox.path)),
        },
        instance=instance,
    )


def query(data_dir: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


def lessonsync(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONSYNC_", "DAGSTER_HOME"))}
    return subprocess.run(
        [LESSONSYNC, *args, "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=data_dir,
    )


def test_a_poisoned_inbox_loads_the_others_quarantines_the_one_and_the_run_succeeds_with_a_warning(tmp_path):
    inbox = poisoned_inbox(tmp_path)
    instance = DagsterInstance.ephemeral()
    result = run_asset(tmp_path, inbox, instance)
    assert result.success
    [metadata] = [
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.asset_key.path[-1] == "certificate_events"
    ]
    assert (metadata["events_loaded"], metadata["quarantined"], metadata["quarantined_in_inbox"]) == (299, 1, 1)
    assert metadata["hwm_after"] == 300  # past the poison: the next load does not meet it again
    warnings = [
        e.user_message
        for e in instance.all_logs(result.run_id)
        if e.level == 30 and "quarantined inbox sequence" in e.user_message
    ]
    assert len(warnings) == 1 and "inbox sequence 151 (certificate 'x'" in warnings[0]
    assert "field creationDate" in warnings[0] and "out of range once converted to UTC" in warnings[0]
    assert query(tmp_path, "SELECT count(*), count(DISTINCT id) FROM lms.certificate_events") == [(299, 299)]
    assert query(tmp_path, "SELECT count(*) FROM lms.certificates WHERE id = 'x'") == [(0,)]
    [letter] = list_dead_letters(inbox)
    assert (letter.sequence, letter.certificate_id, letter.field) == (151, "x", "creationDate")

    again = run_asset(tmp_path, inbox, instance)  # the next run: nothing new, the poison waits and is counted
    assert again.success
    counts = {
        e.asset_key.path[-1]: e.materialization.metadata["quarantined_in_inbox"].value
        for e in again.get_asset_materialization_events()
    }
    assert counts == {"certificate_events": 1, "certificates": 1}

    listed = lessonsync("inbox", "list", data_dir=tmp_path)
    assert listed.returncode == 0 and "151" in listed.stdout and "creationDate" in listed.stdout, listed
    status = lessonsync("status", data_dir=tmp_path)
    assert "certificate inbox: 1 event(s) quarantined" in status.stdout, status
    replay = lessonsync("inbox", "replay", "151", data_dir=tmp_path)  # not fixed: still fails, stays quarantined
    assert replay.returncode == 1 and "still fails, field creationDate" in replay.stderr, replay
    assert [(d.sequence, d.attempts) for d in list_dead_letters(inbox)] == [(151, 2)]
    discard = lessonsync("inbox", "discard", "151", data_dir=tmp_path)
    assert discard.returncode == 0 and "discarded inbox sequence 151" in discard.stdout, discard
    assert list_dead_letters(inbox) == [] and [d.status for d in list_dead_letters(inbox, None)] == ["discarded"]
    assert "event(s) quarantined" not in lessonsync("status", data_dir=tmp_path).stdout  # the inbox line stays
    fresh = run_asset(tmp_path / "fresh", inbox, instance)  # a new warehouse meets it again: it stays discarded
    [metadata] = [
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in fresh.get_asset_materialization_events()
        if e.asset_key.path[-1] == "certificate_events"
    ]
    assert (metadata["events_loaded"], metadata["quarantined"], metadata["quarantined_in_inbox"]) == (299, 0, 0)
    assert [d.status for d in list_dead_letters(inbox, None)] == ["discarded"]


def test_a_dead_letter_replays_into_the_warehouse_once_its_cause_is_fixed(tmp_path):
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    inbox.append([to_delivery(orjson.dumps(certificate(f"c{n}")), T0, "t") for n in range(3)])
    with closing(sqlite3.connect(inbox.path)) as raw:  # event 2 cannot be read by this loader (as after a bug)
        good = raw.execute("SELECT payload FROM events WHERE sequence = 2").fetchone()[0]
        raw.execute("UPDATE events SET payload = ? WHERE sequence = 2", (b'{"_id": "c1", "_userId": 42}',))
        raw.commit()
    assert run_asset(tmp_path, inbox, DagsterInstance.ephemeral()).success
    assert query(tmp_path, "SELECT id FROM lms.certificate_events ORDER BY id") == [("c0",), ("c2",)]
    with closing(sqlite3.connect(inbox.path)) as raw:  # the fix: the event reads again
        raw.execute("UPDATE events SET payload = ? WHERE sequence = 2", (good,))
        raw.commit()
    replay = lessonsync("inbox", "replay", "2", data_dir=tmp_path)
    assert replay.returncode == 0 and "replayed inbox sequence 2 (certificate 'c1') loaded" in replay.stdout, replay
    assert query(tmp_path, "SELECT id FROM lms.certificate_events ORDER BY id") == [("c0",), ("c1",), ("c2",)]
    assert query(tmp_path, "SELECT id, state FROM lms.certificates ORDER BY id") == [
        ("c0", "completed"),
        ("c1", "completed"),
        ("c2", "completed"),
    ]
    assert [d.status for d in list_dead_letters(inbox, None)] == ["replayed"]
    assert lessonsync("inbox", "replay", "2", data_dir=tmp_path).returncode == 1  # already replayed
    assert run_asset(tmp_path, inbox, DagsterInstance.ephemeral()).success  # and the next load stays exact
    assert query(tmp_path, "SELECT count(*) FROM lms.certificate_events") == [(3,)]


def test_lessonsync_sync_prints_one_warning_line_for_quarantined_inbox_events():
    from pipeline.cli.sync import summary_lines

    metadata = {"events_loaded": 299, "quarantined": 1, "quarantined_in_inbox": 1, "dagster/row_count": 299}
    lines = summary_lines({"lms/certificate_events": metadata, "lms/certificates": metadata})
    warnings = [line for line in lines if "WARNING" in line]
    assert len(warnings) == 1 and "1 inbox event(s) quarantined" in warnings[0] and "inbox list" in warnings[0]
    clean = {**metadata, "quarantined": 0, "quarantined_in_inbox": 0}
    assert not [line for line in summary_lines({"lms/certificate_events": clean}) if "WARNING" in line]
