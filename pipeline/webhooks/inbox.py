"""The durable inbox: one SQLite file in WAL mode with synchronous=FULL, separate from the DuckDB
warehouse (DuckDB allows one writer; the receiver must never wait for a sync run).

Only the receiver writes (`open_writer`); the sensor and the loader read through read-only connections,
which WAL lets run beside the writer. `sequence` is an AUTOINCREMENT key: SQLite has one writer at a time
and a transaction's rows appear at commit, so every row committed later has a higher sequence than every
row a reader has already seen -- a high-water mark over `sequence` can never skip an event."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import datetime
from pathlib import Path

from pipeline.webhooks.events import Delivery, Rejected
from pipeline.webhooks.inbox_backend import InboxBacklog, InboxCounts, InboxEvent
from pipeline.webhooks.inbox_writer import BUSY_TIMEOUT_MS, AppendOutcome, InboxWriter

__all__ = ["AppendOutcome", "Inbox", "InboxEvent", "InboxWriter"]

# The load's progress, kept beside the inbox id; only ever moves forward.
RECORD_LOADED = """
INSERT INTO inbox_meta (key, value) VALUES ('loaded_through', ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE CAST(excluded.value AS INTEGER) > CAST(inbox_meta.value AS INTEGER)
"""


class Inbox(InboxCounts):
    """The inbox file. Reading never creates it: a missing inbox simply holds no events."""

    wal_checkpoints = True

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @property
    def location(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Inbox({str(self.path)!r})"

    def open_writer(self, autocheckpoint: bool = True) -> InboxWriter:
        return InboxWriter(self.path, autocheckpoint)

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Copy committed WAL content into the database file (never blocks the writer in PASSIVE mode). Opened
        read-write, never created: an inbox file that is gone is an error here, not a new empty file."""
        uri = f"{self.path.resolve().as_uri()}?mode=rw"
        with closing(sqlite3.connect(uri, uri=True, isolation_level=None)) as conn:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    def append(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]:
        """One-off write in its own connection (tests, tools); the receiver keeps one writer open."""
        writer = self.open_writer()
        try:
            return writer.write(deliveries, rejected)
        finally:
            writer.close()

    def _read_only(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _first_value(self, sql: str) -> object:
        """The first column of the first row, or None when the inbox or the row does not exist."""
        if not self.path.exists():
            return None
        with closing(self._read_only()) as conn:
            row = conn.execute(sql).fetchone()
        return None if row is None else row[0]

    def read_events(
        self, after_sequence: int = 0, limit: int | None = None, up_to_sequence: int | None = None
    ) -> Iterator[InboxEvent]:
        """Events with after_sequence < sequence [<= up_to_sequence], in sequence order, streamed."""
        if not self.path.exists():
            return
        sql = (
            "SELECT sequence, dedupe_key, certificate_id, event_type, received_at, source, payload "
            "FROM events WHERE sequence > ? AND sequence <= ? ORDER BY sequence LIMIT ?"
        )
        upper = up_to_sequence if up_to_sequence is not None else 2**63 - 1
        with closing(self._read_only()) as conn:
            for row in conn.execute(sql, (after_sequence, upper, -1 if limit is None else limit)):
                yield InboxEvent(
                    sequence=row[0],
                    dedupe_key=row[1],
                    certificate_id=row[2],
                    event_type=row[3],
                    received_at=datetime.fromisoformat(row[4]),
                    source=row[5],
                    payload=bytes(row[6]),
                )

    def read_quarantine(self) -> Iterator[tuple[int, datetime, str | None, int, str, bytes | None]]:
        """(id, received_at, source, status, reason, body) of every rejected delivery, oldest first."""
        if not self.path.exists():
            return
        with closing(self._read_only()) as conn:
            sql = "SELECT id, received_at, source, status, reason, body FROM quarantine ORDER BY id"
            for row in conn.execute(sql):
                yield row[0], datetime.fromisoformat(row[1]), row[2], row[3], row[4], row[5]

    def record_loaded(self, sequence: int) -> None:
        """The load's progress, for backlog(); the one write outside the receiver (one short transaction)."""
        if not self.path.exists():
            return
        with closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute(RECORD_LOADED, (str(sequence),))

    def backlog(self) -> InboxBacklog:
        if not self.path.exists():
            return InboxBacklog(0, 0, 0, None)
        with closing(self._read_only()) as conn:
            loaded_row = conn.execute("SELECT value FROM inbox_meta WHERE key = 'loaded_through'").fetchone()
            loaded = int(loaded_row[0]) if loaded_row else 0
            (high,) = conn.execute("SELECT coalesce(max(sequence), 0) FROM events").fetchone()
            (depth,) = conn.execute("SELECT count(*) FROM events WHERE sequence > ?", (loaded,)).fetchone()
            oldest = conn.execute(
                "SELECT received_at FROM events WHERE sequence > ? ORDER BY sequence LIMIT 1", (loaded,)
            ).fetchone()
        return InboxBacklog(int(high), loaded, int(depth), datetime.fromisoformat(oldest[0]) if oldest else None)
