"""What a load and its commit use of each other and of the Warehouse they write to, as protocols: warehouse.py
imports loading/ (Warehouse.load() makes a Load), load.py calls commit.py, early_insert.py imports load.py; none is
imported back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Protocol

import duckdb

from pipeline.contract.tables import TableSpec
from pipeline.warehouse.duck.connection import ConnectionSettings
from pipeline.warehouse.lake.lakestore import LakeStore
from pipeline.warehouse.merge.context import CommitContext
from pipeline.warehouse.merge.protocols import EarlyInsert


class LoadTarget(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def lake(self) -> LakeStore: ...

    @property
    def table_mirror(self) -> object | None: ...  # the Iceberg mirror (lake/iceberg.py), if the warehouse keeps one

    @property
    def connection_settings(self) -> ConnectionSettings: ...

    @property
    def part_rows(self) -> int: ...

    @property
    def row_group_rows(self) -> int: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    def connect(self, read_only: bool = False) -> AbstractContextManager[duckdb.DuckDBPyConnection]: ...

    def commit_context(self, conn: duckdb.DuckDBPyConnection) -> CommitContext: ...


class PendingLoad(Protocol):
    """What commit.py reads of the load it commits (load.py's Load, which calls it)."""

    @property
    def warehouse(self) -> LoadTarget: ...

    @property
    def specs(self) -> Mapping[str, TableSpec]: ...

    @property
    def load_id(self) -> str: ...

    @property
    def stream(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def started_at(self) -> datetime: ...


class EarlyCommit(EarlyInsert, Protocol):
    """What commit.py and load.py need of early_insert.py's EarlyFirstLoad (which imports load.py)."""

    @property
    def conn(self) -> duckdb.DuckDBPyConnection: ...

    @property
    def open(self) -> bool: ...

    @property
    def loaded_at(self) -> datetime: ...

    def committed(self) -> None: ...
