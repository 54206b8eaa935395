"""The inbox in PostgreSQL (`LESSONSYNC_INBOX_URL=postgresql://...`), shared by several receivers.

The promises are those of the SQLite inbox (inbox_backend.py). Two need care with several writers:
- Dedupe across receivers: `dedupe_key` is UNIQUE and rows go in with ON CONFLICT DO UPDATE, so the same
  delivery sent to two receivers at once is one row whose redelivery counter says it came twice.
- Sequences in commit order: a PostgreSQL sequence hands out numbers at insert time, and two transactions
  may commit in the other order, so a reader could see 11 before 10 commits and its high-water mark would
  skip 10 for good. Every write transaction therefore takes one transaction-scoped advisory lock before its
  first insert and holds it to its commit: transactions that add events commit one at a time, in sequence
  order (PostgreSQL makes a commit visible before it releases its locks). Each receiver's group commit puts
  many deliveries in one transaction, so the lock is taken once per batch, not per delivery.

psycopg2 comes with dagster-postgres (the `postgres` extra)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pipeline.webhooks.events import Delivery, Rejected
from pipeline.webhooks.inbox_backend import InboxBacklog, InboxCounts, InboxEvent
from pipeline.webhooks.inbox_writer import AppendOutcome, _BatchCopies

# Advisory lock keys (any two fixed 64-bit numbers no other part of the database uses).
WRITE_LOCK = 0x6C73_696E_626F_7801  # "lsinbox" 1: event writes, in sequence order
SCHEMA_LOCK = 0x6C73_696E_626F_7802  # schema creation by receivers starting at once

SCHEMA = """
CREATE TABLE IF NOT EXISTS lessonsync_inbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lessonsync_inbox_events (
    sequence BIGSERIAL PRIMARY KEY,
    dedupe_key TEXT NOT NULL UNIQUE,
    certificate_id TEXT NOT NULL,
    event_type TEXT NOT NULL CHECK (event_type IN ('certificate_completed', 'certificate_expired')),
    received_at TIMESTAMPTZ NOT NULL,
    source TEXT,
    payload BYTEA NOT NULL,
    redeliveries INTEGER NOT NULL DEFAULT 0,
    last_received_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS lessonsync_inbox_quarantine (
    id BIGSERIAL PRIMARY KEY,
    received_at TIMESTAMPTZ NOT NULL,
    source TEXT,
    content_type TEXT,
    status INTEGER NOT NULL,
    reason TEXT NOT NULL,
    body BYTEA
);
"""
INSERT_EVENTS = """
INSERT INTO lessonsync_inbox_events AS e
    (dedupe_key, certificate_id, event_type, received_at, source, payload, last_received_at, redeliveries)
VALUES %s
ON CONFLICT (dedupe_key) DO UPDATE SET
    redeliveries = e.redeliveries + excluded.redeliveries + 1, last_received_at = excluded.last_received_at
RETURNING dedupe_key, sequence, redeliveries
"""
INSERT_REJECTED = """
INSERT INTO lessonsync_inbox_quarantine (received_at, source, content_type, status, reason, body) VALUES %s
"""
RECORD_LOADED = """
INSERT INTO lessonsync_inbox_meta (key, value) VALUES ('loaded_through', %s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE excluded.value::bigint > lessonsync_inbox_meta.value::bigint
"""
CONNECT_TIMEOUT_S = 10


def redacted(url: str) -> str:
    """The URL without its password, for log lines and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def connect(url: str) -> Any:
    import psycopg2

    try:
        return psycopg2.connect(url, connect_timeout=CONNECT_TIMEOUT_S, application_name="lessonsync-inbox")
    except psycopg2.OperationalError as exc:
        # psycopg2's message names host and port but never the password; say which setting it came from.
        raise ConnectionError(f"inbox {redacted(url)} (LESSONSYNC_INBOX_URL): {exc}".strip()) from None


class PostgresInboxWriter:
    """One receiver's connection. Each `write` is one transaction, durable when it returns (the server's
    synchronous_commit, on by default, decides what durable means: keep it on for the inbox)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._conn: Any = None
        self._open()

    def _open(self) -> None:
        self._conn = connect(self._url)
        with self._conn, self._conn.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            cursor.execute(SCHEMA)
            cursor.execute(
                "INSERT INTO lessonsync_inbox_meta (key, value) VALUES ('inbox_id', %s) ON CONFLICT DO NOTHING",
                (uuid.uuid4().hex,),
            )

    def write(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]:
        from psycopg2.extras import execute_values

        if not deliveries and not rejected:
            return []
        if self._conn is None or self._conn.closed:  # a lost connection is reopened by the next batch
            self._open()
        batch = _BatchCopies(deliveries)
        stored: dict[str, tuple[int, int]] = {}
        try:
            with self._conn, self._conn.cursor() as cursor:
                if deliveries:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    rows = [(*row[:5], _bytes(row[5]), *row[6:]) for row in batch.rows()]
                    returned = execute_values(cursor, INSERT_EVENTS, rows, page_size=len(rows), fetch=True)
                    stored = {key: (sequence, redeliveries) for key, sequence, redeliveries in returned}
                if rejected:
                    execute_values(
                        cursor,
                        INSERT_REJECTED,
                        [
                            (r.received_at, r.source, r.content_type, r.status, r.reason, _bytes(r.body))
                            for r in rejected
                        ],
                    )
        except Exception:
            self.close()  # a broken connection is not reused
            raise
        return batch.outcomes(stored)

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()


def _bytes(value: object) -> object:
    import psycopg2

    return psycopg2.Binary(value) if isinstance(value, bytes | bytearray | memoryview) else value


class PostgresInbox(InboxCounts):
    """The inbox tables in the database at `url`. Reading never creates them: a missing inbox holds nothing."""

    META_TABLE = "lessonsync_inbox_meta"
    EVENTS_TABLE = "lessonsync_inbox_events"
    QUARANTINE_TABLE = "lessonsync_inbox_quarantine"

    wal_checkpoints = False

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return f"PostgresInbox({self.location!r})"

    @property
    def location(self) -> str:
        return redacted(self.url)

    def open_writer(self, autocheckpoint: bool = True) -> PostgresInboxWriter:
        return PostgresInboxWriter(self.url)

    def checkpoint(self, mode: str = "PASSIVE") -> None:
        """Nothing to do: PostgreSQL checkpoints itself."""

    def append(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]:
        writer = self.open_writer()
        try:
            return writer.write(deliveries, rejected)
        finally:
            writer.close()

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """All rows, or none when the inbox tables do not exist yet."""
        import psycopg2.errors

        with closing(connect(self.url)) as conn:
            try:
                with conn, conn.cursor() as cursor:
                    cursor.execute(sql, params)
                    return list(cursor.fetchall())
            except psycopg2.errors.UndefinedTable:
                return []

    def _first_value(self, sql: str, params: Sequence[object] = ()) -> object:
        rows = self._query(sql, params)
        return rows[0][0] if rows else None

    def read_events(
        self, after_sequence: int = 0, limit: int | None = None, up_to_sequence: int | None = None
    ) -> Iterator[InboxEvent]:
        """Events with after_sequence < sequence [<= up_to_sequence], in sequence order, streamed through a
        server-side cursor."""
        if self.inbox_id() is None:
            return
        sql = (
            "SELECT sequence, dedupe_key, certificate_id, event_type, received_at, source, payload "
            "FROM lessonsync_inbox_events WHERE sequence > %s AND sequence <= %s ORDER BY sequence"
            + ("" if limit is None else f" LIMIT {int(limit)}")
        )
        upper = up_to_sequence if up_to_sequence is not None else 2**63 - 1
        with closing(connect(self.url)) as conn, conn, conn.cursor(name="inbox_events") as cursor:
            cursor.itersize = 2000
            cursor.execute(sql, (after_sequence, upper))
            for row in cursor:
                yield InboxEvent(
                    sequence=row[0],
                    dedupe_key=row[1],
                    certificate_id=row[2],
                    event_type=row[3],
                    received_at=row[4],
                    source=row[5],
                    payload=bytes(row[6]),
                )

    def read_quarantine(self) -> Iterator[tuple[int, datetime, str | None, int, str, bytes | None]]:
        rows = self._query(
            "SELECT id, received_at, source, status, reason, body FROM lessonsync_inbox_quarantine ORDER BY id"
        )
        for row in rows:
            yield row[0], row[1], row[2], row[3], row[4], None if row[5] is None else bytes(row[5])

    def record_loaded(self, sequence: int) -> None:
        if self.inbox_id() is None:
            return
        with closing(connect(self.url)) as conn, conn, conn.cursor() as cursor:
            cursor.execute(RECORD_LOADED, (str(sequence),))

    def backlog(self) -> InboxBacklog:
        rows = self._query(
            """
            WITH loaded AS (
                SELECT coalesce((SELECT value::bigint FROM lessonsync_inbox_meta WHERE key = 'loaded_through'), 0)
                    AS through
            )
            SELECT (SELECT coalesce(max(sequence), 0) FROM lessonsync_inbox_events), loaded.through,
                   (SELECT count(*) FROM lessonsync_inbox_events WHERE sequence > loaded.through),
                   (SELECT received_at FROM lessonsync_inbox_events WHERE sequence > loaded.through
                    ORDER BY sequence LIMIT 1)
            FROM loaded
            """
        )
        if not rows:
            return InboxBacklog(0, 0, 0, None)
        high, loaded, depth, oldest = rows[0]
        return InboxBacklog(int(high), int(loaded), int(depth), oldest)
