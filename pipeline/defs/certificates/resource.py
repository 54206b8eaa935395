"""The certificate inbox as a Dagster resource. Only reads; the receiver process is its one writer."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from pipeline.settings import Settings
from pipeline.webhooks import InboxBackend, open_inbox


class InboxResource(ConfigurableResource[Any]):
    """The inbox the webhook receivers write: PostgreSQL when `url` is set, else the SQLite file."""

    path: str = Field(description="SQLite inbox file (the code location passes Settings.inbox_path).")
    url: str | None = Field(
        None, description="postgresql:// URL of a shared inbox (LESSONSYNC_INBOX_URL, passed as an EnvVar)."
    )

    def inbox(self) -> InboxBackend:
        """Opening nothing: each read opens and closes its own connection. Without `url`, LESSONSYNC_INBOX_URL
        may still come from a .env file, which only the settings read."""
        if self.url:
            return open_inbox(self.url)
        from_settings = Settings().receiver.inbox_url
        return open_inbox(from_settings.get_secret_value() if from_settings is not None else self.path)
