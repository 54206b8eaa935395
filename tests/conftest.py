"""Fixtures shared across test packages: a whole local stack (simulator + webhook receiver) and a warehouse
synced from it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import Stack, local_stack

# The Iceberg mirror (on by default) is tested by the tests that turn it on (iceberg_helpers.ICEBERG_ENV): the
# others leave it off, since each sync's Iceberg commits would add minutes to a suite that must stay under ten.
os.environ.setdefault("LESSONSYNC_TABLE_FORMAT", "none")


@pytest.fixture(scope="session")
def synced_tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A tiny platform two simulated days into its life (activity, certificates completed and expired)
    and a warehouse fully synced from it, exactly. Read-only for its users: do not sync or advance it."""
    data_dir: Path = tmp_path_factory.mktemp("synced_tiny") / "data"
    with local_stack(data_dir, scale="tiny") as stack:
        stack.advance(hours=48)
        report = stack.sync(select=RAW)
        assert report.success, report.error
        assert_warehouse_equals_platform(stack)
        yield stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow end-to-end tests first: most of their time is spent waiting (the daemon's minute ticks, an outage),
    so `make test`'s workers (pytest-xdist, handed 2 tests at a time: --maxschedchunk) spread them and overlap
    them with the fast ones instead of ending on them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
