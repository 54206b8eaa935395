"""Fixtures for the simulator tests: real simulators on loopback at scale tiny."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from simtools import api_client

from simulator import SimulatorConfig, SimulatorHandle, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    """One simulator shared by a module's read-only tests (seed 42, tiny, no faults)."""
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(sim: SimulatorHandle) -> Iterator[httpx.Client]:
    with api_client(sim) as http:
        yield http


@pytest.fixture
def fresh_sim() -> Iterator[SimulatorHandle]:
    """A simulator of its own, for tests that change the world."""
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as handle:
        yield handle


@pytest.fixture
def fresh_client(fresh_sim: SimulatorHandle) -> Iterator[httpx.Client]:
    with api_client(fresh_sim) as http:
        yield http
