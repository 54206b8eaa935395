"""Opens the inbox a location names: a PostgreSQL database (`LESSONSYNC_INBOX_URL=postgresql://...`) or a SQLite
file. Above both backends (inbox.py, inbox_postgres.py) and the promises they share (inbox_backend.py), so none of
them imports another to be chosen."""

from __future__ import annotations

from pathlib import Path

from pipeline.extras import require_extra
from pipeline.webhooks.inbox_backend import InboxBackend

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: str | Path | None) -> bool:
    return isinstance(location, str) and location.startswith(POSTGRES_SCHEMES)


def open_inbox(location: str | Path) -> InboxBackend:
    """The inbox at a postgresql:// URL, else the SQLite file at that path."""
    if is_postgres_url(location):
        require_extra("postgres", "LESSONSYNC_INBOX_URL=postgresql://...")
        from pipeline.webhooks.inbox_postgres import PostgresInbox

        return PostgresInbox(str(location))
    from pipeline.webhooks.inbox import Inbox

    return Inbox(location)
