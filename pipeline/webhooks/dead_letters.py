"""Dead letters: stored inbox events the loader could not turn into rows (a poison message), kept aside so the
other events load. One row per inbox sequence, in the inbox (the SQLite file or the PostgreSQL database) beside the events, with the event id, the
field and the error; the event's payload stays in `events`. An operator lists them, replays one once the cause
is fixed (load.replay_dead_letter) or discards it (`lessonsync inbox`).

The loader writes here (the receiver never does): rarely, in short transactions that wait for the receiver's
writer like any SQLite writer (busy timeout). A dead letter is recorded before the warehouse position moves
past its event, so a crash in between leaves the event to the next load, never lost. Each function takes the
inbox and does one thing, so another inbox backend provides the same few functions."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.inbox_backend import InboxBackend
from pipeline.webhooks.inbox_writer import BUSY_TIMEOUT_MS

Status = Literal["quarantined", "replayed", "discarded"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS dead_letters (
    sequence BIGINT PRIMARY KEY,
    event_id TEXT NOT NULL,
    certificate_id TEXT NOT NULL,
    field TEXT NOT NULL,
    error TEXT NOT NULL,
    quarantined_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    status TEXT NOT NULL DEFAULT 'quarantined' CHECK (status IN ('quarantined', 'replayed', 'discarded')),
    resolved_at TEXT
)
"""
# Meeting a dead letter again (a replay that fails, a load into a new warehouse) updates its row: the latest
# error, one more attempt. A discarded one stays discarded.
UPSERT = """
INSERT INTO dead_letters (sequence, event_id, certificate_id, field, error, quarantined_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (sequence) DO UPDATE SET
    field = excluded.field, error = excluded.error, attempts = dead_letters.attempts + 1, status = 'quarantined', resolved_at = NULL
WHERE dead_letters.status != 'discarded'
"""
COLUMNS = "sequence, event_id, certificate_id, field, error, quarantined_at, attempts, status, resolved_at"


@dataclass(frozen=True)
class DeadLetter:
    sequence: int
    event_id: str
    certificate_id: str
    field: str  # API path of the offending field, or "payload" when the error names none
    error: str
    quarantined_at: datetime
    attempts: int = 1
    status: Status = "quarantined"
    resolved_at: datetime | None = None

    def describe(self) -> str:
        return (
            f"inbox sequence {self.sequence} (certificate {self.certificate_id!r}, event {self.event_id[:12]}), "
            f"field {self.field}: {self.error}"
        )


class _Store:
    """One connection to the dead-letter table of either inbox backend: SQLite's file (`?` placeholders, a
    writer waiting on the receiver's like any SQLite writer) or PostgreSQL (`%s`)."""

    def __init__(self, conn: Any, placeholder: str, postgres: bool) -> None:
        self.conn, self.mark, self.postgres = conn, placeholder, postgres

    def sql(self, text: str) -> str:
        return text.replace("?", self.mark)

    def rows(self, text: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        cursor = self.conn.cursor()
        cursor.execute(self.sql(text), tuple(params))
        return list(cursor.fetchall())

    def run(self, text: str, params: Sequence[object] = ()) -> None:
        self.conn.cursor().execute(self.sql(text), tuple(params))

    def close(self) -> None:
        self.conn.close()


def _writer(inbox: InboxBackend) -> _Store:
    if isinstance(inbox, Inbox):
        conn = sqlite3.connect(inbox.path, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(SCHEMA)
        return _Store(conn, "?", postgres=False)
    store = _postgres(inbox)
    store.run(SCHEMA)
    return store


def _reader(inbox: InboxBackend) -> _Store | None:
    """A connection, or None when the inbox or its dead-letter table does not exist yet."""
    if not isinstance(inbox, Inbox):
        store = _postgres(inbox)
        if not store.rows("SELECT 1 FROM information_schema.tables WHERE table_name = 'dead_letters'"):
            store.close()
            return None
        return store
    if not inbox.path.exists():
        return None
    conn = sqlite3.connect(inbox.path.resolve().as_uri() + "?mode=ro", uri=True)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dead_letters'").fetchone()
    if found is None:
        conn.close()
        return None
    return _Store(conn, "?", postgres=False)


def _postgres(inbox: InboxBackend) -> _Store:
    from pipeline.webhooks.inbox_postgres import PostgresInbox, connect

    assert isinstance(inbox, PostgresInbox), f"no dead-letter store for {inbox!r}"
    conn = connect(inbox.url)
    conn.autocommit = True  # each statement its own transaction, as SQLite's isolation_level=None
    return _Store(conn, "%s", postgres=True)


def record_dead_letters(inbox: InboxBackend, letters: Sequence[DeadLetter]) -> list[DeadLetter]:
    """Store (or refresh) dead letters in one durable transaction; returns those now waiting in quarantine
    (the ones an operator discarded before are left as they are, and out)."""
    if not letters:
        return []
    rows = [(d.sequence, d.event_id, d.certificate_id, d.field, d.error, d.quarantined_at.isoformat()) for d in letters]
    sequences = [d.sequence for d in letters]
    marks = ", ".join("?" * len(sequences))
    discarded_sql = f"SELECT sequence FROM dead_letters WHERE status = 'discarded' AND sequence IN ({marks})"
    with closing(_writer(inbox)) as store:
        store.run("BEGIN" if store.postgres else "BEGIN IMMEDIATE")
        try:
            for row in rows:
                store.run(UPSERT, row)
            discarded = {row[0] for row in store.rows(discarded_sql, sequences)}
            store.run("COMMIT")
        except BaseException:
            store.run("ROLLBACK")
            raise
    return [d for d in letters if d.sequence not in discarded]


def list_dead_letters(inbox: InboxBackend, status: Status | None = "quarantined") -> list[DeadLetter]:
    """Dead letters in sequence order: those with `status`, or all of them (None)."""
    store = _reader(inbox)
    if store is None:
        return []
    where, params = ("WHERE status = ?", (status,)) if status is not None else ("", ())
    with closing(store):
        rows = store.rows(f"SELECT {COLUMNS} FROM dead_letters {where} ORDER BY sequence", params)
    return [_letter(row) for row in rows]


def get_dead_letter(inbox: InboxBackend, sequence: int) -> DeadLetter | None:
    store = _reader(inbox)
    if store is None:
        return None
    with closing(store):
        rows = store.rows(f"SELECT {COLUMNS} FROM dead_letters WHERE sequence = ?", (sequence,))
    return _letter(rows[0]) if rows else None


def count_dead_letters(inbox: InboxBackend) -> int:
    """Events waiting in quarantine (neither replayed nor discarded); 0 without an inbox."""
    store = _reader(inbox)
    if store is None:
        return 0
    with closing(store):
        return int(store.rows("SELECT count(*) FROM dead_letters WHERE status = 'quarantined'")[0][0])


def resolve_dead_letter(inbox: InboxBackend, sequence: int, status: Literal["replayed", "discarded"]) -> None:
    """Mark a dead letter replayed or discarded; the row stays, for the record."""
    with closing(_writer(inbox)) as store:
        store.run(
            "UPDATE dead_letters SET status = ?, resolved_at = ? WHERE sequence = ?",
            (status, datetime.now(UTC).isoformat(), sequence),
        )


def _letter(row: tuple[object, ...]) -> DeadLetter:
    sequence, event_id, certificate_id, field, error, quarantined_at, attempts, status, resolved_at = row
    return DeadLetter(
        sequence=int(sequence),  # type: ignore[call-overload]
        event_id=str(event_id),
        certificate_id=str(certificate_id),
        field=str(field),
        error=str(error),
        quarantined_at=datetime.fromisoformat(str(quarantined_at)),
        attempts=int(attempts),  # type: ignore[call-overload]
        status=status,  # type: ignore[arg-type]
        resolved_at=None if resolved_at is None else datetime.fromisoformat(str(resolved_at)),
    )
