"""Certificate webhooks: an authenticated receiver that writes every delivery to a durable inbox (SQLite, or
PostgreSQL shared by several receivers) before answering 2xx, and the plain functions that load that inbox into
the DuckDB warehouse. See docs/webhooks.md.

    app = create_app(load_webhook_settings())        # the receiver (uvicorn: server_config)
    stats = load_certificate_events(warehouse, open_inbox(location))   # the inbox into lms.certificate_*

This module is the package's only entrance: code outside `pipeline.webhooks` imports from here, never from its
modules (the import contract `webhooks-facade` in pyproject.toml checks it). Each name is imported from its module
when first asked for, so the receiver process never loads the warehouse (DuckDB) the load needs, and an inbox
command of the CLI loads only what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.facades import lazy_names

if TYPE_CHECKING:
    from pipeline.webhooks.app import create_app
    from pipeline.webhooks.dead_letters import (
        count_dead_letters,
        get_dead_letter,
        list_dead_letters,
        resolve_dead_letter,
    )
    from pipeline.webhooks.inbox_backend import InboxBackend
    from pipeline.webhooks.inbox_open import open_inbox
    from pipeline.webhooks.load import (
        LoadStats,
        certificate_summary,
        load_certificate_events,
        replay_dead_letter,
        table_rows,
        table_versions,
    )
    from pipeline.webhooks.server import server_config
    from pipeline.webhooks.settings import WebhookConfigError, WebhookSettings, load_webhook_settings
    from pipeline.webhooks.status import InboxStatus, inbox_status

# Each public name and the module that defines it.
_EXPORTS = {
    "create_app": "app",
    "count_dead_letters": "dead_letters",
    "get_dead_letter": "dead_letters",
    "list_dead_letters": "dead_letters",
    "resolve_dead_letter": "dead_letters",
    "InboxBackend": "inbox_backend",
    "open_inbox": "inbox_open",
    "LoadStats": "load",
    "certificate_summary": "load",
    "load_certificate_events": "load",
    "replay_dead_letter": "load",
    "table_rows": "load",
    "table_versions": "load",
    "server_config": "server",
    "WebhookConfigError": "settings",
    "WebhookSettings": "settings",
    "load_webhook_settings": "settings",
    "InboxStatus": "status",
    "inbox_status": "status",
}

__all__ = [
    "InboxBackend",
    "InboxStatus",
    "LoadStats",
    "WebhookConfigError",
    "WebhookSettings",
    "certificate_summary",
    "count_dead_letters",
    "create_app",
    "get_dead_letter",
    "inbox_status",
    "list_dead_letters",
    "load_certificate_events",
    "load_webhook_settings",
    "open_inbox",
    "replay_dead_letter",
    "resolve_dead_letter",
    "server_config",
    "table_rows",
    "table_versions",
]


__getattr__ = lazy_names(__name__, _EXPORTS)
