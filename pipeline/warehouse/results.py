"""What a committed load did, per table: the numbers the Dagster assets put in their metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class TableLoadStats:
    fetched: int = 0  # rows written to the lake for this table in this load (before dedupe)
    inserted: int = 0  # keys new to the warehouse
    updated: int = 0  # keys whose data changed, or that came back after being marked deleted
    unchanged: int = 0  # keys seen again with identical data (not written; a complete snapshot's record says it saw
    # them: lms._snapshot_seen); append tables: rows whose key was already there (kept as first written)
    deleted: int = 0  # rows newly marked deleted: vanished from a complete snapshot, or replaced children
    stale: int = 0  # rows older (by cursor field, or ordered before by order_by) than the warehouse's copy

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class LoadResult:
    stream: str
    run_id: str
    load_id: str
    seq: int  # position of this load in the lake's total order of committed loads
    loaded_at: datetime  # the load time written to first/last_loaded_at and deleted_at
    cursor_before: datetime | None
    cursor_after: datetime | None
    tables: dict[str, TableLoadStats] = field(default_factory=dict)
    manifest: Path | str | None = None  # a file, or an s3:// URL
    position_before: int | None = None  # streams read from an ordered log (Load.commit(position=...))
    position_after: int | None = None
    repeat_of: int | None = None  # a complete snapshot equal to this earlier load's: no row compared or written

    def metadata(self) -> dict[str, object]:
        """Flat, JSON-friendly numbers for Dagster materialization metadata."""
        out: dict[str, object] = {
            "load_seq": self.seq,
            "cursor_before": self.cursor_before.isoformat() if self.cursor_before else None,
            "cursor_after": self.cursor_after.isoformat() if self.cursor_after else None,
        }
        if self.position_after is not None:
            out.update(position_before=self.position_before, position_after=self.position_after)
        for table, stats in self.tables.items():
            for name, value in stats.as_dict().items():
                out[f"{table}.{name}"] = value
        return out
