"""The certificate inbox as a Dagster resource. Only reads; the receiver process is its one writer."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from pipeline.webhooks.inbox import Inbox


class InboxResource(ConfigurableResource[Any]):
    """The SQLite inbox the webhook receiver writes."""

    path: str = Field(description="SQLite inbox file (the code location passes Settings.inbox_path).")

    def inbox(self) -> Inbox:
        """Opening nothing: each read opens and closes its own read-only connection."""
        return Inbox(self.path)
