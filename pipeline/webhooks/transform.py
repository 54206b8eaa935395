"""Inbox events -> one Arrow table per chunk, in the column layout of lms.certificate_events."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from pipeline.webhooks.events import PayloadError, as_utc, parse_certificate
from pipeline.webhooks.inbox import InboxEvent
from pipeline.webhooks.tables import CERTIFICATE_EVENTS, payload_row


class InboxEventError(ValueError):
    """A stored event no longer validates (the Certificate model changed since it was received)."""


def event_row(event: InboxEvent, inbox_id: str) -> dict[str, object]:
    try:
        document, certificate = parse_certificate(event.payload)
    except PayloadError as exc:
        raise InboxEventError(
            f"inbox event {event.sequence} (certificate {event.certificate_id!r}) no longer validates: {exc}; "
            "it was accepted at receipt, so the Certificate model has become stricter -- relax it, then reload"
        ) from None
    return {
        "event_id": event.dedupe_key,
        "event_type": event.event_type,
        "received_at": as_utc(event.received_at),
        "source": event.source,
        "inbox_id": inbox_id,
        "sequence": event.sequence,
        **payload_row(document, certificate),
    }


def events_to_arrow(events: Sequence[InboxEvent], inbox_id: str) -> pa.Table:
    """Column-wise build so that pyarrow converts each column once."""
    schema = CERTIFICATE_EVENTS.schema
    columns: dict[str, list[object]] = {name: [] for name in schema.names}
    for event in events:
        for name, value in event_row(event, inbox_id).items():
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=schema)
