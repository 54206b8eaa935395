"""Load the certificate inbox into the warehouse through Warehouse.load(), like every stream: the events and
the current state go to the lake as Parquet parts and are committed with the stream's position, so DDL,
column evolution, sync state, manifests, roll-forward and `lessonsync rebuild` are the streams' own. Shared
by the Dagster asset and `lessonsync sync`.

Exactly once: each inbox is a stream, `certificate_inbox_<inbox id>` (a recreated inbox restarts its
sequence, so it starts a stream of its own), whose position in lms._sync_state is the inbox sequence up to
which the warehouse holds every event; it moves in the same transaction as the rows it covers, one load per
chunk. A run killed at any point leaves the old position with the old rows; a retried run starts from the
position. Event ids (the inbox deduplication key) make a reload from a recreated inbox skip what is there:
such events are left out of the load, and the events table keeps a key's first row whatever happens.

No poison message: an event that cannot become a row (it no longer validates, a date-time overflows, ...) is
recorded as a dead letter in the inbox (dead_letters.py) before the position moves past it, and the others
load. The load reports it (LoadStats.dead_letters); `replay_dead_letter` loads it once the cause is fixed."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES
from pipeline.warehouse import Warehouse, content_versions, row_count
from pipeline.webhooks.dead_letters import (
    DeadLetter,
    count_dead_letters,
    get_dead_letter,
    record_dead_letters,
    resolve_dead_letter,
)
from pipeline.webhooks.events import COMPLETED, EXPIRED
from pipeline.webhooks.inbox_backend import InboxBackend, InboxEvent
from pipeline.webhooks.legacy import adopt_legacy_state
from pipeline.webhooks.stream import SPECS, high_water_mark, inbox_stream
from pipeline.webhooks.transform import current_state_rows, events_to_arrow_isolating

log = logging.getLogger(__name__)
DEFAULT_CHUNK_EVENTS = 10_000


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
    dead_letters: list[DeadLetter] = field(default_factory=list)  # events this load set aside
    quarantined_pending: int = 0  # dead letters of the inbox waiting for a replay or a discard

    @property
    def quarantined(self) -> int:
        return len(self.dead_letters)


def load_certificate_events(
    warehouse: Warehouse, inbox: InboxBackend, *, run_id: str | None = None, chunk_events: int = DEFAULT_CHUNK_EVENTS
) -> LoadStats:
    """Load every inbox event past the stream's position, in sequence order, one committed load per chunk.
    Events arriving during the load wait for the next one, so the load always ends."""
    run_id = run_id or f"certificates-{uuid.uuid4().hex[:12]}"
    warehouse.ensure_tables(SPECS)  # also rolls forward a load whose commit was interrupted
    adopt_legacy_state(warehouse, run_id)
    stats = LoadStats(inbox_id=inbox.inbox_id())
    if stats.inbox_id is None:
        return stats  # no inbox yet: the receiver has not run
    stream = inbox_stream(stats.inbox_id)
    stats.hwm_before = stats.hwm_after = high_water_mark(warehouse, stats.inbox_id)
    up_to = inbox.max_sequence()
    events = inbox.read_events(after_sequence=stats.hwm_before, up_to_sequence=up_to)
    for chunk in _chunks(events, chunk_events):
        incoming, failed = events_to_arrow_isolating(chunk, stats.inbox_id)
        if failed:  # recorded before the position moves past them
            letters = record_dead_letters(inbox, [_dead_letter(event, where, error) for event, where, error in failed])
            for letter in letters:  # those an operator discarded before are not reported again
                log.warning("certificates: quarantined %s (see `lessonsync inbox list`)", letter.describe())
            stats.dead_letters += letters
        _load_chunk(warehouse, stream, run_id, incoming, (chunk[0].sequence, chunk[-1].sequence), stats)
        log.info("certificates: loaded up to inbox sequence %d of %d", stats.hwm_after, up_to)
        _record_loaded(inbox, stats.hwm_after)
    if stats.hwm_after and not stats.transactions:
        _record_loaded(inbox, stats.hwm_after)  # e.g. an inbox whose progress mark was never written
    stats.quarantined_pending = count_dead_letters(inbox)
    return stats


def _record_loaded(inbox: InboxBackend, sequence: int) -> None:
    """Tell the inbox how far the warehouse holds it (its backlog metrics); a failure only delays them."""
    try:
        inbox.record_loaded(sequence)
    except Exception:  # noqa: BLE001 - advisory: the warehouse's own position is what the next load uses
        log.warning("certificates: could not record the load's progress in the inbox", exc_info=True)


def _dead_letter(event: InboxEvent, where: str, error: str) -> DeadLetter:
    return DeadLetter(event.sequence, event.dedupe_key, event.certificate_id, where, error, datetime.now(UTC))


def replay_dead_letter(warehouse: Warehouse, inbox: InboxBackend, sequence: int, *, run_id: str | None = None) -> str:
    """Load one quarantined event again (after its cause was fixed) and mark it replayed; returns what happened.
    Raises ValueError when `sequence` is no dead letter waiting, or when the event still fails (the dead letter
    then keeps the new error and counts the attempt)."""
    letter = get_dead_letter(inbox, sequence)
    if letter is None or letter.status != "quarantined":
        state = "no dead letter" if letter is None else f"already {letter.status}"
        raise ValueError(f"inbox sequence {sequence}: {state} (see `lessonsync inbox list`)")
    inbox_id = inbox.inbox_id()
    assert inbox_id is not None  # a dead letter lives in an inbox
    [event] = list(inbox.read_events(after_sequence=sequence - 1, up_to_sequence=sequence))
    incoming, failed = events_to_arrow_isolating([event], inbox_id)
    if failed:
        [(_, where, error)] = failed
        record_dead_letters(inbox, [_dead_letter(event, where, error)])
        raise ValueError(f"inbox sequence {sequence} still fails, field {where}: {error}")
    warehouse.ensure_tables(SPECS)
    new = _not_loaded(warehouse, incoming)
    run_id = run_id or f"certificates-replay-{uuid.uuid4().hex[:12]}"
    with warehouse.load(inbox_stream(inbox_id), run_id=run_id, started_at=datetime.now(UTC)) as load:
        if new.num_rows:
            load.write(CERTIFICATE_EVENTS, new)
            load.write(CERTIFICATES, current_state_rows(new))
        load.commit(stats={"replayed_sequence": sequence})  # the position stays: it is already past the event
    resolve_dead_letter(inbox, sequence, "replayed")
    return f"inbox sequence {sequence} (certificate {event.certificate_id!r}) " + (
        "loaded" if new.num_rows else "was already in the warehouse"
    )


def _chunks(events: Iterator[InboxEvent], size: int) -> Iterator[list[InboxEvent]]:
    while chunk := list(islice(events, size)):
        yield chunk


def _load_chunk(
    warehouse: Warehouse, stream: str, run_id: str, incoming: pa.Table, sequences: tuple[int, int], stats: LoadStats
) -> None:
    """One committed load of a chunk's rows (dead letters left out), moving the position to the chunk's end."""
    chunk_min, chunk_max = sequences
    new = _not_loaded(warehouse, incoming)
    by_type = {count["values"]: count["counts"] for count in pc.value_counts(new.column("event_type")).to_pylist()}
    with warehouse.load(stream, run_id=run_id, started_at=datetime.now(UTC)) as load:
        if new.num_rows:
            load.write(CERTIFICATE_EVENTS, new)
            load.write(CERTIFICATES, current_state_rows(new))
        result = load.commit(
            position=chunk_max,
            stats={
                "inbox_sequence_from": chunk_min,
                "inbox_sequence_to": chunk_max,
                "events_read": incoming.num_rows,
            },
        )
    events, certificates = result.tables.get(CERTIFICATE_EVENTS.name), result.tables.get(CERTIFICATES.name)
    loaded = events.inserted if events else 0
    stats.events_read += incoming.num_rows
    stats.events_loaded += loaded
    stats.completed += int(by_type.get(COMPLETED, 0))
    stats.expired += int(by_type.get(EXPIRED, 0))
    stats.duplicates_skipped += incoming.num_rows - loaded
    stats.certificates_changed += (certificates.inserted + certificates.updated) if certificates else 0
    stats.hwm_after = max(stats.hwm_after, result.position_after or 0)
    stats.transactions += 1


def _not_loaded(warehouse: Warehouse, incoming: pa.Table) -> pa.Table:
    """The events whose id the warehouse does not hold yet (a recreated inbox delivers old ones again): they
    are neither events nor state changes. The events table would keep the first row anyway; leaving them out
    keeps their certificates' last_loaded_at, as a load that read nothing new."""
    with warehouse.connect(read_only=True) as conn:
        conn.register("incoming_event_ids", incoming.select(["event_id"]))
        try:
            loaded = conn.sql(
                f"SELECT event_id FROM lms.{CERTIFICATE_EVENTS.name} "
                "WHERE event_id IN (SELECT event_id FROM incoming_event_ids)"
            ).to_arrow_table()
        finally:
            conn.unregister("incoming_event_ids")
    if not loaded.num_rows:
        return incoming
    return incoming.filter(pc.invert(pc.is_in(incoming.column("event_id"), value_set=loaded.column("event_id"))))


def certificate_summary(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Certificates per current state and events per type, for the demo and the CLI summary."""
    summary = {
        f"certificates_{state}": n
        for state, n in conn.execute(
            f"SELECT state, count(*) FROM lms.{CERTIFICATES.name} GROUP BY state ORDER BY state"
        ).fetchall()
    }
    summary.update(
        {
            f"events_{kind}": n
            for kind, n in conn.execute(
                f"SELECT event_type, count(*) FROM lms.{CERTIFICATE_EVENTS.name} GROUP BY event_type ORDER BY 1"
            ).fetchall()
        }
    )
    return summary


def table_rows(warehouse: Warehouse) -> dict[str, int]:
    """Rows per certificate table, for the asset's dagster/row_count."""
    with warehouse.connect(read_only=True) as conn:
        return {spec.name: row_count(conn, spec.name) for spec in SPECS}


def table_versions(warehouse: Warehouse) -> dict[str, int]:
    """Per certificate table, the seq of the newest load that changed its rows: the asset's data version."""
    with warehouse.connect(read_only=True) as conn:
        return content_versions(conn, [spec.name for spec in SPECS])
