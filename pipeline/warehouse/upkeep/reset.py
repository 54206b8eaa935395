"""An operator moving one stream's cursor back (`lessonsync reset`), so the next sync re-reads from there.

A reset is a load like any other, only with no table and a cursor that is set rather than advanced: it commits
with the same lock, lake manifest and DuckDB transaction, so a roll-forward or `lessonsync rebuild` replays it
and agrees with the warehouse. It never moves a cursor forward: that would skip records silently."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pipeline.warehouse.errors import WarehouseError
from pipeline.warehouse.results import LoadResult
from pipeline.warehouse.warehouse import Warehouse

RESET_RUN_PREFIX = "reset-"


def reset_cursor(warehouse: Warehouse, stream: str, to: datetime | None) -> LoadResult:
    """Set `stream`'s cursor to `to` (None: the beginning), which must not be after the stored cursor."""
    if to is not None and (to.tzinfo is None or to.utcoffset() is None):
        raise WarehouseError(f"reset time {to.isoformat()} has no UTC offset; write it like 2026-01-31T00:00:00Z")
    current = warehouse.cursor(stream)
    if current is None:
        raise WarehouseError(
            f"stream {stream!r} has no cursor in {warehouse.path} (never synced, or a snapshot "
            "stream, which is pulled whole every run): nothing to reset"
        )
    if to is not None and to > current:
        raise WarehouseError(
            f"reset of {stream} to {to.isoformat()} would move its cursor forward from "
            f"{current.isoformat()} and skip records; a reset only moves a cursor back"
        )
    now = datetime.now(UTC)
    with warehouse.load(stream, run_id=f"{RESET_RUN_PREFIX}{uuid.uuid4()}", started_at=now) as load:
        return load.commit(
            cursor=to,
            stats={"reset": True, "cursor_was": current.isoformat()},
            cursor_reset=True,
            replace_children_of={},
        )
