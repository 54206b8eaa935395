"""Dead letters: stored inbox events the loader could not turn into rows (a poison message), kept aside so the
other events load. One row per inbox sequence, in the inbox file beside the events, with the event id, the
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
from typing import Literal

from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.inbox_writer import BUSY_TIMEOUT_MS

Status = Literal["quarantined", "replayed", "discarded"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS dead_letters (
    sequence INTEGER PRIMARY KEY,
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
    field = excluded.field, error = excluded.error, attempts = attempts + 1, status = 'quarantined', resolved_at = NULL
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


def _writer(inbox: Inbox) -> sqlite3.Connection:
    conn = sqlite3.connect(inbox.path, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute(SCHEMA)
    return conn


def _reader(inbox: Inbox) -> sqlite3.Connection | None:
    """A read-only connection, or None when the inbox or its dead-letter table does not exist yet."""
    if not inbox.path.exists():
        return None
    conn = sqlite3.connect(inbox.path.resolve().as_uri() + "?mode=ro", uri=True)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'dead_letters'").fetchone()
    if found is None:
        conn.close()
        return None
    return conn


def record_dead_letters(inbox: Inbox, letters: Sequence[DeadLetter]) -> list[DeadLetter]:
    """Store (or refresh) dead letters in one durable transaction; returns those now waiting in quarantine
    (the ones an operator discarded before are left as they are, and out)."""
    if not letters:
        return []
    rows = [(d.sequence, d.event_id, d.certificate_id, d.field, d.error, d.quarantined_at.isoformat()) for d in letters]
    sequences = [d.sequence for d in letters]
    marks = ", ".join("?" * len(sequences))
    discarded_sql = f"SELECT sequence FROM dead_letters WHERE status = 'discarded' AND sequence IN ({marks})"
    with closing(_writer(inbox)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(UPSERT, rows)
            discarded = {row[0] for row in conn.execute(discarded_sql, sequences)}
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return [d for d in letters if d.sequence not in discarded]


def list_dead_letters(inbox: Inbox, status: Status | None = "quarantined") -> list[DeadLetter]:
    """Dead letters in sequence order: those with `status`, or all of them (None)."""
    conn = _reader(inbox)
    if conn is None:
        return []
    where, params = ("WHERE status = ?", (status,)) if status is not None else ("", ())
    with closing(conn):
        rows = conn.execute(f"SELECT {COLUMNS} FROM dead_letters {where} ORDER BY sequence", params).fetchall()
    return [_letter(row) for row in rows]


def get_dead_letter(inbox: Inbox, sequence: int) -> DeadLetter | None:
    conn = _reader(inbox)
    if conn is None:
        return None
    with closing(conn):
        row = conn.execute(f"SELECT {COLUMNS} FROM dead_letters WHERE sequence = ?", (sequence,)).fetchone()
    return None if row is None else _letter(row)


def count_dead_letters(inbox: Inbox) -> int:
    """Events waiting in quarantine (neither replayed nor discarded); 0 without an inbox."""
    conn = _reader(inbox)
    if conn is None:
        return 0
    with closing(conn):
        return int(conn.execute("SELECT count(*) FROM dead_letters WHERE status = 'quarantined'").fetchone()[0])


def resolve_dead_letter(inbox: Inbox, sequence: int, status: Literal["replayed", "discarded"]) -> None:
    """Mark a dead letter replayed or discarded; the row stays, for the record."""
    with closing(_writer(inbox)) as conn:
        conn.execute(
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
