"""Load the certificate inbox into DuckDB: plain functions over a connection, shared by the Dagster asset
and `lessonsync sync`.

Exactly once: the inbox sequence high-water mark lives in the warehouse (lms.certificate_inbox_state,
one row per inbox id) and is advanced in the same transaction as the rows it covers. A run killed at any
point leaves the old mark with the old rows; a retried run starts from the mark. Event ids (the inbox
deduplication key) make a reload from a recreated inbox skip what is already there."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice

import duckdb
import pyarrow as pa

from pipeline.webhooks import sql
from pipeline.webhooks.inbox import Inbox, InboxEvent
from pipeline.webhooks.tables import CERTIFICATE_EVENTS, CERTIFICATES
from pipeline.webhooks.transform import events_to_arrow

log = logging.getLogger(__name__)
DEFAULT_CHUNK_EVENTS = 10_000
# Like every warehouse table. An event row is never updated, so its two stamps are equal.
LOAD_COLUMNS = ["first_loaded_at TIMESTAMPTZ NOT NULL", "last_loaded_at TIMESTAMPTZ NOT NULL"]


@dataclass
class LoadStats:
    """What one load did; becomes the asset's materialization metadata."""

    inbox_id: str | None = None
    hwm_before: int = 0
    hwm_after: int = 0
    events_read: int = 0
    events_loaded: int = 0
    completed: int = 0
    expired: int = 0
    duplicates_skipped: int = 0
    certificates_changed: int = 0
    transactions: int = 0


def ensure_certificate_tables(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("CREATE SCHEMA IF NOT EXISTS lms")
    for spec in (CERTIFICATE_EVENTS, CERTIFICATES):
        conn.execute(sql.create_table(spec, extra_columns=LOAD_COLUMNS))
    conn.execute(sql.CREATE_STATE)


def scalar(conn: duckdb.DuckDBPyConnection, query: str, params: list[object] | None = None) -> object:
    """The single value of a query, or None. fetchall, not fetchone: DuckDB 2 refuses the next call on a
    connection whose last result was not read to the end."""
    rows = conn.execute(query, params or []).fetchall()
    return rows[0][0] if rows else None


def high_water_mark(conn: duckdb.DuckDBPyConnection, inbox_id: str) -> int:
    value = scalar(conn, sql.READ_HWM, [inbox_id])
    return 0 if value is None else int(value)  # type: ignore[call-overload]


def load_certificate_events(
    conn: duckdb.DuckDBPyConnection, inbox: Inbox, chunk_events: int = DEFAULT_CHUNK_EVENTS
) -> LoadStats:
    """Load every inbox event past the warehouse's high-water mark, in sequence order, one transaction
    per chunk. Events arriving during the load wait for the next one, so the load always ends."""
    ensure_certificate_tables(conn)
    stats = LoadStats(inbox_id=inbox.inbox_id())
    if stats.inbox_id is None:
        return stats  # no inbox yet: the receiver has not run
    stats.hwm_before = stats.hwm_after = high_water_mark(conn, stats.inbox_id)
    up_to = inbox.max_sequence()
    loaded_at = datetime.now(UTC)
    events = inbox.read_events(after_sequence=stats.hwm_before, up_to_sequence=up_to)
    for chunk in _chunks(events, chunk_events):
        _load_chunk(conn, events_to_arrow(chunk, stats.inbox_id), stats, loaded_at)
        log.info("certificates: loaded up to inbox sequence %d of %d", stats.hwm_after, up_to)
    return stats


def _chunks(events: Iterator[InboxEvent], size: int) -> Iterator[list[InboxEvent]]:
    while chunk := list(islice(events, size)):
        yield chunk


def _load_chunk(conn: duckdb.DuckDBPyConnection, incoming: pa.Table, stats: LoadStats, loaded_at: datetime) -> None:
    assert stats.inbox_id is not None
    conn.register("incoming_certificate_events", incoming)
    try:
        conn.execute("BEGIN TRANSACTION")
        try:
            # Re-read inside the transaction: a concurrent load may have moved the mark meanwhile.
            hwm = high_water_mark(conn, stats.inbox_id)
            conn.execute(sql.SELECT_NEW_EVENTS, [hwm])
            new_by_type = dict(conn.execute(sql.COUNT_NEW_BY_TYPE).fetchall())
            conn.execute(sql.insert_events(), [loaded_at, loaded_at])
            changed = scalar(conn, sql.merge_certificates(), [loaded_at, loaded_at, loaded_at])
            chunk_max = int(incoming.column("sequence")[-1].as_py())
            conn.execute(sql.UPSERT_HWM, [stats.inbox_id, chunk_max, loaded_at])
            conn.execute("DROP TABLE new_certificate_events")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.unregister("incoming_certificate_events")
    loaded = sum(new_by_type.values())
    stats.events_read += incoming.num_rows
    stats.events_loaded += loaded
    stats.completed += new_by_type.get("certificate_completed", 0)
    stats.expired += new_by_type.get("certificate_expired", 0)
    stats.duplicates_skipped += incoming.num_rows - loaded
    stats.certificates_changed += int(changed or 0)  # type: ignore[call-overload]
    stats.hwm_after = max(stats.hwm_after, chunk_max)
    stats.transactions += 1


def certificate_summary(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Certificates per current state and events per type, for the demo and the CLI summary."""
    ensure_certificate_tables(conn)
    summary = {f"certificates_{state}": n for state, n in conn.execute(sql.COUNT_BY_STATE).fetchall()}
    summary.update({f"events_{kind}": n for kind, n in conn.execute(sql.COUNT_EVENTS_BY_TYPE).fetchall()})
    return summary

