"""Which instant a delivery's `expires` is judged against, and an optional declared event type.

The spec names no event-type field and no official way to tell the two events apart, so the type is
inferred: expired when `expires` is not after the moment of the event. By default that moment is the
sender's clock when the request carries a standard HTTP `Date` header: the platform decided "expired"
on its own clock, and a platform (or a simulator) whose clock differs from ours would otherwise have
completions taken for expiries, or the reverse. Without a usable Date header it is the receipt time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import get_args

from pipeline.webhooks.events import EventType, as_utc
from pipeline.webhooks.settings import WebhookSettings

# Date has whole seconds; an expiry sent in the same second as `expires` must still count as expired.
DATE_RESOLUTION = timedelta(seconds=1) - timedelta(microseconds=1)
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))


def sender_instant(date_header: str | None) -> datetime | None:
    """The last microsecond of the second named by an HTTP Date header, or None if absent or unreadable."""
    if not date_header:
        return None
    try:
        return as_utc(parsedate_to_datetime(date_header)) + DATE_RESOLUTION
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


@dataclass(frozen=True)
class EventClock:
    use_sender_clock: bool
    event_type_header: str | None

    @classmethod
    def from_settings(cls, settings: WebhookSettings) -> EventClock:
        header = settings.event_type_header.lower() if settings.event_type_header else None
        return cls(settings.expiry_clock == "sender", header)

    def reference_at(self, headers: Mapping[str, str], received_at: datetime) -> datetime:
        sent_at = sender_instant(headers.get("date")) if self.use_sender_clock else None
        return sent_at if sent_at is not None else received_at

    def declared_type(self, headers: Mapping[str, str]) -> EventType | None:
        """The configured header's value when it is one of the two known types; anything else is ignored."""
        if self.event_type_header is None:
            return None
        value = (headers.get(self.event_type_header) or "").strip()
        return value if value in EVENT_TYPES else None  # type: ignore[return-value]
