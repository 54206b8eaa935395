"""The planners of planned streams, by the name their declaration gives (`Planned.planner`, pipeline/contract/
streams.py): the runner plans a planned stream from its parent's records through the one named there, and asks of
the plan only what `Plan` says. The answers' (pipeline/raw/answers.py) is the one planner today."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pipeline.contract.streams import SyncStream
from pipeline.contract.tables import TableSpec
from pipeline.raw.answer_versions import VERSIONS
from pipeline.raw.answers import plan_answers
from pipeline.raw.commit import StreamLoad
from pipeline.raw.windows import Window
from pipeline.settings import SyncSettings
from pipeline.source import Batch, PlatformClient, RunStats
from pipeline.warehouse import Load, Warehouse


class Plan(Protocol):
    """A planned stream's plan for one run: what the runner fetches, writes with the commit, and reports."""

    ceiling: datetime | None  # the parent's cursor of the records planned from, once committed (windows.py)

    @property
    def parent_rows(self) -> int: ...  # parent records planned from (decides the insert while fetched)

    def fetch(self, client: PlatformClient) -> tuple[Iterator[Batch], str]: ...  # lazy batches, and a log phrase

    def before_commit(self, load: Load, stats: RunStats) -> None: ...  # sync state written into the same commit

    def committed(self, done: StreamLoad) -> tuple[str, dict[str, object]]: ...  # a log line, metadata

    def close(self) -> None: ...  # after the commit, or when the fetch is cancelled


class PlanFunction(Protocol):
    def __call__(
        self,
        warehouse: Warehouse,
        window: Window,
        settings: SyncSettings,
        *,
        loading: Load | None,
        ceiling: datetime | None,
    ) -> Plan: ...


@dataclass(frozen=True)
class Planner:
    """`plan(warehouse, window, settings, loading=, ceiling=)`: the plan of `window`, from the parent's committed
    records and, when given, its uncommitted `loading`. `state_tables`: sync state its plans write (created with
    every raw table)."""

    plan: PlanFunction
    state_tables: tuple[TableSpec, ...] = ()


PLANNERS: dict[str, Planner] = {"answers": Planner(plan_answers, (VERSIONS,))}


def planner_of(stream: SyncStream) -> Planner:
    """The planner `stream` names; ValueError naming the known ones when there is none of that name."""
    name = stream.planned.planner if stream.planned is not None else None
    if name not in PLANNERS:
        raise ValueError(
            f"stream {stream.name}: no planner named {name!r} in pipeline/raw/planners.py (planners: "
            f"{', '.join(PLANNERS)}); a planned stream names one of them"
        )
    return PLANNERS[name]


def state_tables() -> list[TableSpec]:
    """Every planner's sync state tables."""
    return [table for planner in PLANNERS.values() for table in planner.state_tables]
