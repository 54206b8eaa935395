"""A faithful, fast, deterministic implementation of the platform API (shared/platform-api.md) over
real HTTP, for tests, the demo and benchmarks. See server.start_simulator, cli.py and `python -m simulator`.

It is written from the spec alone and imports nothing from LessonSync (`pipeline`): its shapes are in
schemas.py, and `lint-imports` (.importlinter) holds the rule."""

from simulator.config import SCALES, SimulatorConfig
from simulator.faults import FaultSpec, parse_faults
from simulator.newfields import NewField
from simulator.server import SimulatorHandle, launch, start_simulator

__all__ = [
    "SCALES",
    "FaultSpec",
    "NewField",
    "SimulatorConfig",
    "SimulatorHandle",
    "launch",
    "parse_faults",
    "start_simulator",
]
