"""Receive the platform's certificate webhooks (completed, expired) over HTTP and store each delivery in the
durable inbox (a SQLite file, or PostgreSQL with LESSONSYNC_INBOX_URL) before answering; the certificate sensor, or `lessonsync sync`, loads the inbox into the
warehouse.

Options override the LESSONSYNC_WEBHOOK_* settings; credentials (LESSONSYNC_WEBHOOK_BEARER_TOKENS, _BASIC_
CREDENTIALS or _API_KEYS) come only from the environment or .env, so that they never show in a process list."""

from __future__ import annotations

import argparse
import base64
import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.options import bounded_int

if TYPE_CHECKING:
    from pipeline.webhooks import WebhookSettings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=bounded_int(1, 65_535), default=8766, help="TCP port (default 8766)")
    parser.add_argument("--path", help="POST path (default LESSONSYNC_WEBHOOK_PATH or /webhooks/certificates)")
    parser.add_argument(
        "--inbox", type=Path, metavar="FILE", help="SQLite inbox file (default <data dir>/inbox.sqlite3)"
    )
    parser.add_argument(
        "--allow-open", action="store_true", help="accept deliveries without any credential (local use only)"
    )
    parser.add_argument("--access-log", action="store_true", help="log every request line (slower)")


def _webhook_settings(args: argparse.Namespace) -> WebhookSettings:
    from pipeline.webhooks import load_webhook_settings

    overrides: dict[str, object] = {}
    if args.path:
        overrides["path"] = args.path
    if args.inbox:
        overrides["inbox_path"] = args.inbox
    if args.allow_open:
        overrides["allow_open"] = True
    return load_webhook_settings(**overrides)


def _credentials(settings: WebhookSettings) -> list[str]:
    """Every credential the receiver accepts, a basic pair also as its password and as its header value."""
    values = [secret.get_secret_value() for secret in (*settings.bearer_tokens, *settings.api_keys)]
    for pair in (secret.get_secret_value() for secret in settings.basic_credentials):
        values += [pair, pair.partition(":")[2], base64.b64encode(pair.encode()).decode()]
    return values


def run(args: argparse.Namespace) -> int:
    # The web server and the inbox are imported when the command runs, so that its --help answers at once.
    import uvicorn

    from pipeline.logs import register_secrets
    from pipeline.settings import SettingsError
    from pipeline.webhooks import WebhookConfigError, create_app

    try:
        settings = _webhook_settings(args)
        app = create_app(settings)
    except (WebhookConfigError, SettingsError) as exc:
        print(f"lessonsync receive: {exc}", file=sys.stderr)
        return 2
    register_secrets(_credentials(settings))  # no log line carries one
    # Everything imported so far lives as long as the process: keep the collector from rescanning it,
    # which otherwise shows as latency spikes under load.
    gc.freeze()
    from pipeline.webhooks import server_config

    config = server_config(
        app,
        settings,
        host=args.host,
        port=args.port,
        on_close=app.state.metrics.connection_closed,
        access_log=args.access_log,
        log_level="debug" if args.verbose else "info",
        log_config=None,  # keep the console of pipeline.cli (pipeline/logs.py): uvicorn's lines in its format
        timeout_graceful_shutdown=10,
        proxy_headers=False,  # the client address is only logged; do not trust forwarding headers for it
        server_header=False,
    )
    uvicorn.Server(config).run()
    return 0
