"""The certificate inbox as a Dagster resource. Only reads; the receiver process is its one writer."""

from __future__ import annotations

from dagster import ConfigurableResource

from pipeline.webhooks.inbox import Inbox


class InboxResource(ConfigurableResource):
    """The SQLite inbox the webhook receiver writes (default <LESSONSYNC_DATA_DIR>/inbox.sqlite3)."""

    path: str = "data/inbox.sqlite3"

    def inbox(self) -> Inbox:
        """Opening nothing: each read opens and closes its own read-only connection."""
        return Inbox(self.path)
