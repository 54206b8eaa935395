"""Writing the inbox: schema, and one durable transaction per batch of deliveries (WAL, synchronous=FULL).

Only the receiver writes, through one InboxWriter owned by its group-commit thread."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

from pipeline.webhooks.events import Delivery, Rejected

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    dedupe_key TEXT NOT NULL UNIQUE,
    certificate_id TEXT NOT NULL,
    event_type TEXT NOT NULL CHECK (event_type IN ('certificate_completed', 'certificate_expired')),
    received_at TEXT NOT NULL,
    source TEXT,
    payload BLOB NOT NULL,
    redeliveries INTEGER NOT NULL DEFAULT 0,
    last_received_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at TEXT NOT NULL,
    source TEXT,
    content_type TEXT,
    status INTEGER NOT NULL,
    reason TEXT NOT NULL,
    body BLOB
);
"""

# A redelivery bumps a counter on the stored row instead of adding one; its sequence does not change.
# `redeliveries` of a new row starts at the number of copies that arrived in the same batch.
INSERT_EVENTS_HEAD = """
INSERT INTO events (dedupe_key, certificate_id, event_type, received_at, source, payload, last_received_at,
                    redeliveries)
VALUES """
INSERT_EVENTS_TAIL = """
ON CONFLICT (dedupe_key) DO UPDATE SET
    redeliveries = redeliveries + excluded.redeliveries + 1, last_received_at = excluded.last_received_at
"""
# One result row for the whole batch (see InboxWriter._upsert for why).
STORED_KEYS = """
SELECT json_group_array(json_array(dedupe_key, sequence, redeliveries)) FROM events
WHERE dedupe_key IN (SELECT value FROM json_each(?))
"""
ROWS_PER_STATEMENT = 1000  # 8 bind variables each, well under SQLite's limit of 32766
INSERT_REJECTED = """
INSERT INTO quarantine (received_at, source, content_type, status, reason, body) VALUES (?, ?, ?, ?, ?, ?)
"""
BUSY_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class AppendOutcome:
    sequence: int
    duplicate: bool


def _timestamp(moment: datetime) -> str:
    # Fixed microsecond precision keeps the text sortable.
    return moment.isoformat(timespec="microseconds")


def _rejected_row(r: Rejected) -> tuple[object, ...]:
    return (_timestamp(r.received_at), r.source, r.content_type, r.status, r.reason, r.body)


class _BatchCopies:
    """Deliveries of one transaction grouped by dedupe key (a platform may redeliver within the batch)."""

    def __init__(self, deliveries: Sequence[Delivery]) -> None:
        self.deliveries = deliveries
        self.first: dict[str, Delivery] = {}
        self.last: dict[str, Delivery] = {}
        self.copies: dict[str, int] = {}
        for delivery in deliveries:
            key = delivery.dedupe_key
            self.first.setdefault(key, delivery)
            self.last[key] = delivery
            self.copies[key] = self.copies.get(key, -1) + 1

    def rows(self) -> list[tuple[object, ...]]:
        return [
            (
                key,
                d.certificate_id,
                d.event_type,
                _timestamp(d.received_at),
                d.source,
                d.payload,
                _timestamp(self.last[key].received_at),
                self.copies[key],
            )
            for key, d in self.first.items()
        ]

    def outcomes(self, stored: dict[str, tuple[int, int]]) -> list[AppendOutcome]:
        """The first copy is a duplicate only if the row existed before this batch (its counter then
        exceeds the copies of this batch); later copies always are."""
        seen: set[str] = set()
        outcomes = []
        for delivery in self.deliveries:
            key = delivery.dedupe_key
            sequence, redeliveries = stored[key]
            duplicate = key in seen or redeliveries > self.copies[key]
            seen.add(key)
            outcomes.append(AppendOutcome(sequence=sequence, duplicate=duplicate))
        return outcomes


class InboxWriter:
    """The receiver's single read-write connection. Each `write` call is one durable transaction."""

    def __init__(self, path: Path, autocheckpoint: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise RuntimeError(f"inbox {path}: SQLite refused WAL mode (got {mode}); use a local filesystem")
        self._conn.execute("PRAGMA synchronous = FULL")  # fsync the WAL at every commit
        if not autocheckpoint:  # the caller checkpoints from another thread (checkpoint.py)
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._conn.executescript(SCHEMA)
        self._conn.execute("INSERT OR IGNORE INTO inbox_meta (key, value) VALUES ('inbox_id', ?)", (uuid.uuid4().hex,))

    def write(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]:
        """Store deliveries and quarantined bodies in one transaction; returns once it is on disk.
        Outcomes are in the order of `deliveries`."""
        batch = _BatchCopies(deliveries)
        if not deliveries and not rejected:
            return []
        cursor = self._conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            stored = self._upsert(cursor, batch)
            if rejected:
                cursor.executemany(INSERT_REJECTED, [_rejected_row(r) for r in rejected])
            cursor.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                cursor.execute("ROLLBACK")
            raise
        return batch.outcomes(stored)

    @staticmethod
    def _upsert(cursor: sqlite3.Cursor, batch: _BatchCopies) -> dict[str, tuple[int, int]]:
        """Multi-row statements and a single aggregated result row, because every sqlite3 call gives
        the GIL away and getting it back can take a whole switch interval while the event loop is
        busy: a row-by-row write (or RETURNING, one step per row) makes commits 5-10x slower."""
        rows = batch.rows()
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            sql = INSERT_EVENTS_HEAD + ",".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk)) + INSERT_EVENTS_TAIL
            cursor.execute(sql, [value for row in chunk for value in row])
        keys = orjson.dumps(list(batch.first))
        (stored_json,) = cursor.execute(STORED_KEYS, (keys,)).fetchone()
        return {key: (sequence, redeliveries) for key, sequence, redeliveries in orjson.loads(stored_json)}

    def close(self) -> None:
        self._conn.close()
