"""Fixtures of the webhook tests: a receiver on loopback with credentials of every scheme."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from webhook_helpers import BEARER, RunningReceiver, make_settings, serve_in_thread

from pipeline.webhooks.settings import WebhookSettings


@pytest.fixture(autouse=True)
def _no_webhook_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings come from each test, never from the developer's environment or .env."""
    for name in list(os.environ):
        if name.startswith("LESSONSYNC_WEBHOOK_"):
            monkeypatch.delenv(name)
    monkeypatch.setitem(WebhookSettings.model_config, "env_file", None)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[RunningReceiver]:
    with serve_in_thread(make_settings(tmp_path)) as running:
        yield running


@pytest.fixture
def bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {BEARER}"}
