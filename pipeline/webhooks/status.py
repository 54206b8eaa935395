"""The certificate inbox as `lessonsync status` shows it: what the receiver stored and the warehouse has not
loaded yet, and the deliveries it rejected."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pipeline.warehouse import SCHEMA, StreamStatus, TableRows
from pipeline.webhooks.dead_letters import count_dead_letters
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.stream import inbox_stream


@dataclass
class InboxStatus:
    """The certificate inbox: what the receiver stored and the warehouse has not loaded yet."""

    inbox_id: str | None
    loaded_up_to: int  # the inbox stream's position (sequence of the last event loaded)
    depth: int  # events stored and not loaded
    oldest_unloaded_at: datetime | None
    quarantined: dict[str, int]  # where -> rejected deliveries (the inbox's own table, the warehouse's if any)

    @property
    def stream(self) -> str | None:
        return inbox_stream(self.inbox_id) if self.inbox_id else None


def inbox_status(inbox_path: Path, statuses: list[StreamStatus], table_rows: TableRows) -> InboxStatus:
    inbox = Inbox(inbox_path)
    inbox_id = inbox.inbox_id()
    stream = next((s for s in statuses if inbox_id and s.stream == inbox_stream(inbox_id)), None)
    position = stream.position or 0 if stream else 0
    first = next(inbox.read_events(after_sequence=position, limit=1), None)
    # rejected deliveries (answered 4xx), and stored events the loader could not turn into rows (dead letters)
    quarantined = {"inbox": inbox.count_quarantined(), "dead letters": count_dead_letters(inbox)}
    for table, rows in table_rows.rows.items():  # a warehouse table of rejected deliveries, where one is kept
        if "inbox" in table and "quarantine" in table:
            quarantined[f"{SCHEMA}.{table}"] = rows
    return InboxStatus(
        inbox_id,
        position,
        max(inbox.max_sequence() - position, 0),
        first.received_at if first else None,
        quarantined,
    )
