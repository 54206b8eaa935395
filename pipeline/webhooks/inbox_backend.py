"""What the receiver, the sensor and the load need from an inbox, whatever stores it: a SQLite file (the
embedded default, one receiver) or PostgreSQL (`LESSONSYNC_INBOX_URL=postgresql://...`, several receivers).

Every backend keeps the same promises:
- `InboxWriter.write` returns only once its transaction is durable, and stores each dedupe key once
  (a redelivery, from any receiver, bumps a counter on the stored row);
- sequences are assigned in commit order: a row committed later has a higher sequence than every row a
  reader has already seen, so a high-water mark over `sequence` never skips an event (this is what makes
  the load exactly-once);
- `inbox_id` is fixed at creation; a recreated inbox has a new one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pipeline.webhooks.events import Delivery, EventType, Rejected
from pipeline.webhooks.inbox_writer import AppendOutcome


@dataclass(frozen=True)
class InboxEvent:
    """One stored delivery, as every backend reads it back."""

    sequence: int
    dedupe_key: str
    certificate_id: str
    event_type: EventType
    received_at: datetime
    source: str | None
    payload: bytes


@dataclass(frozen=True)
class InboxBacklog:
    """What is stored but not loaded yet, by the position the load records in the inbox."""

    max_sequence: int
    loaded_through: int
    depth: int
    oldest_unloaded_at: datetime | None

    def oldest_unloaded_age(self, now: datetime) -> float:
        """Seconds the oldest unloaded event has waited (0 when every event is loaded)."""
        return max(0.0, (now - self.oldest_unloaded_at).total_seconds()) if self.oldest_unloaded_at else 0.0


class InboxCounts:
    """The look-ups both inboxes answer with the same queries over their own table names; a backend gives
    `_first_value` (the first column of the first row, None when there is none)."""

    META_TABLE = "inbox_meta"
    EVENTS_TABLE = "events"
    QUARANTINE_TABLE = "quarantine"

    def _first_value(self, sql: str) -> object:
        raise NotImplementedError

    def _count(self, sql: str) -> int:
        value = self._first_value(sql)
        return int(value) if isinstance(value, int) else 0

    def inbox_id(self) -> str | None:
        """Random id given at creation: a recreated inbox restarts its sequence, and readers must know."""
        value = self._first_value(f"SELECT value FROM {self.META_TABLE} WHERE key = 'inbox_id'")
        return value if isinstance(value, str) else None

    def max_sequence(self) -> int:
        return self._count(f"SELECT coalesce(max(sequence), 0) FROM {self.EVENTS_TABLE}")

    def count_events(self) -> int:
        return self._count(f"SELECT count(*) FROM {self.EVENTS_TABLE}")

    def count_events_between(self, after_sequence: int, up_to_sequence: int) -> int:
        """Events with after_sequence < sequence <= up_to_sequence: sequences have gaps (a redelivery, a rolled back
        write, PostgreSQL's sequence cache each use numbers no event keeps), so a difference of two is no count."""
        low, high = int(after_sequence), int(up_to_sequence)
        return self._count(f"SELECT count(*) FROM {self.EVENTS_TABLE} WHERE sequence > {low} AND sequence <= {high}")

    def count_quarantined(self) -> int:
        return self._count(f"SELECT count(*) FROM {self.QUARANTINE_TABLE}")


class InboxWriterBackend(Protocol):
    def write(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]: ...

    def close(self) -> None: ...


class InboxBackend(Protocol):
    """The inbox as the receiver, the sensor and the load use it."""

    wal_checkpoints: bool  # the receiver runs a checkpoint thread for it (SQLite's WAL)

    @property
    def location(self) -> str:
        """Where it is, for log lines: a path, or a database URL without its password."""
        ...

    def open_writer(self, autocheckpoint: bool = True) -> InboxWriterBackend: ...

    def checkpoint(self, mode: str = "PASSIVE") -> None: ...

    def append(self, deliveries: Sequence[Delivery], rejected: Sequence[Rejected] = ()) -> list[AppendOutcome]: ...

    def inbox_id(self) -> str | None: ...

    def max_sequence(self) -> int: ...

    def count_events(self) -> int: ...

    def count_events_between(self, after_sequence: int, up_to_sequence: int) -> int: ...

    def count_quarantined(self) -> int: ...

    def read_events(
        self, after_sequence: int = 0, limit: int | None = None, up_to_sequence: int | None = None
    ) -> Iterator[InboxEvent]: ...

    def read_quarantine(self) -> Iterator[tuple[int, datetime, str | None, int, str, bytes | None]]: ...

    def record_loaded(self, sequence: int) -> None:
        """Note that the warehouse holds every event up to `sequence` (for backlog(); advisory only: the
        warehouse's own position stays the truth the load resumes from)."""
        ...

    def backlog(self) -> InboxBacklog: ...
