"""Fixtures for the source-client tests: real simulators on loopback (scale tiny), clients against them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.decoding import Batch
from simulator import SimulatorConfig, SimulatorHandle, start_simulator

PAGE_SIZE = 7  # small pages: many of them, page boundaries everywhere, mid-stream empty answer pages


def client_settings(sim: SimulatorHandle, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "base_url": sim.base_url,
        "page_size": PAGE_SIZE,
        "concurrency": 4,
        "max_attempts": 8,
        "retry_max_wait": 2.0,
        "data_dir": "unused",
    }
    return Settings(**{**values, **overrides})


def rows_by_table(batches: Iterable[Batch]) -> dict[str, list[dict[str, Any]]]:
    tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for batch in batches:
        assert batch.records.schema == batch.table.schema
        tables[batch.table.name].extend(batch.records.to_pylist())
    return tables


def truth(sim: SimulatorHandle, *resources: str) -> dict[str, list[dict[str, Any]]]:
    return {name: list(sim.ground_truth(name)) for name in resources}


def all_pairs(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({"user_id": [r["user_id"] for r in rows], "lesson_id": [r["lesson_id"] for r in rows]})


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    """One tiny simulator shared by a module's read-only tests."""
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(sim: SimulatorHandle) -> Iterator[PlatformClient]:
    with PlatformClient(client_settings(sim)) as platform_client:
        yield platform_client
