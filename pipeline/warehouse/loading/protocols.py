"""What a load and its commit use of the Warehouse they write to, as a protocol: warehouse.py imports loading/
(Warehouse.load() makes a Load), so loading/ does not import it back."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol

import duckdb

from pipeline.warehouse.duck.connection import ConnectionSettings
from pipeline.warehouse.lake.iceberg import IcebergMirror
from pipeline.warehouse.lake.lakestore import LakeStore
from pipeline.warehouse.merge.context import CommitContext


class LoadTarget(Protocol):
    @property
    def lake(self) -> LakeStore: ...

    @property
    def connection_settings(self) -> ConnectionSettings: ...

    @property
    def part_rows(self) -> int: ...

    @property
    def row_group_rows(self) -> int: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    @property
    def table_mirror(self) -> IcebergMirror | None: ...

    def connect(self, read_only: bool = False) -> AbstractContextManager[duckdb.DuckDBPyConnection]: ...

    def commit_context(self, conn: duckdb.DuckDBPyConnection) -> CommitContext: ...
