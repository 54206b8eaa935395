"""The certificate inbox as `lessonsync status` shows it, SQLite or PostgreSQL alike: what the receiver stored and
the warehouse has not loaded yet, and the deliveries it rejected."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pipeline.warehouse import SCHEMA, StreamStatus, TableRows
from pipeline.webhooks.dead_letters import count_dead_letters
from pipeline.webhooks.inbox_backend import InboxBackend
from pipeline.webhooks.stream import inbox_stream


@dataclass
class InboxStatus:
    """The certificate inbox: what the receiver stored and the warehouse has not loaded yet."""

    inbox_id: str | None  # None: no inbox yet (the receiver has stored nothing)
    location: str  # the file, or the PostgreSQL URL without its password
    received: int  # the highest sequence stored (0: no delivery yet)
    loaded_up_to: int  # the inbox stream's position (sequence of the last event loaded)
    depth: int  # events stored and not loaded
    oldest_unloaded_at: datetime | None
    quarantined: dict[str, int]  # where -> rejected deliveries (the inbox's own table, the warehouse's if any)

    @property
    def stream(self) -> str | None:
        return inbox_stream(self.inbox_id) if self.inbox_id else None


def inbox_status(inbox: InboxBackend, statuses: list[StreamStatus], table_rows: TableRows) -> InboxStatus:
    """Read from the inbox and the stream positions of the lake's manifests (a missing inbox holds nothing)."""
    inbox_id = inbox.inbox_id()
    stream = next((s for s in statuses if inbox_id and s.stream == inbox_stream(inbox_id)), None)
    position = stream.position or 0 if stream else 0
    first = next(inbox.read_events(after_sequence=position, limit=1), None)
    # rejected deliveries (answered 4xx), and stored events the loader could not turn into rows (dead letters)
    quarantined = {"inbox": inbox.count_quarantined(), "dead letters": count_dead_letters(inbox)}
    for table, rows in table_rows.rows.items():  # a warehouse table of rejected deliveries, where one is kept
        if "inbox" in table and "quarantine" in table:
            quarantined[f"{SCHEMA}.{table}"] = rows
    received = inbox.max_sequence()
    return InboxStatus(
        inbox_id,
        inbox.location,
        received,
        position,
        max(received - position, 0),
        first.received_at if first else None,
        quarantined,
    )
