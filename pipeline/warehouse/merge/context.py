"""CommitContext: what every step of the commit path needs besides the load itself (a live commit, the
roll-forward of an interrupted one, a replay during a rebuild), passed as one object."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from pipeline.warehouse.lake.lakestore import LakeStore
from pipeline.warehouse.merge.protocols import EarlyInsert
from pipeline.warehouse.merge.staging import Stage
from pipeline.warehouse.merge.upsert import upsert_stage

# (connection, classified stage, load time as a SQL literal) -> None: applies the stage to its table
Upsert = Callable[[duckdb.DuckDBPyConnection, Stage, str], None]


@dataclass(frozen=True)
class CommitContext:
    conn: duckdb.DuckDBPyConnection  # read-write: it holds the file's write lock
    lake: LakeStore  # where the loads' parts and manifests are
    upsert: Upsert = upsert_stage  # the product's strategy; bench/upsert_options.py passes the ones that lost
    early: EarlyInsert | None = None  # a live commit whose first load went in while it was written
