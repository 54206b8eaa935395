"""What the merge needs of a first load inserted while it was written (loading/early_insert.py's
EarlyFirstLoad), as a protocol: merge/ sits below loading/ and does not import it."""

from __future__ import annotations

from typing import Protocol

from pipeline.warehouse.duck.tabledef import TableDef
from pipeline.warehouse.lake.manifest import TableLoad
from pipeline.warehouse.merge.staging import Stage


class EarlyInsert(Protocol):
    def holds(self, table: str) -> bool:
        """Whether `table`'s rows of this load went (or go) in early: the commit finishes them (stage)."""
        ...

    def stage(self, load: TableLoad, target: TableDef, files: list[str]) -> Stage:
        """The load's stage of `target`, its rows already in the table (the parts of `files` not inserted yet go in)."""
        ...

    def take_out(self, table: str) -> None:
        """Delete the rows inserted early: the table is empty again within the transaction."""
        ...
