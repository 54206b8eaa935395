"""What each stream's state is, read from the lake's load manifests alone: readable while a sync holds the
DuckDB file (the manifests are written atomically, one per committed load, and never change)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pipeline.warehouse.lake import LakeLocation, list_manifests, read_manifest
from pipeline.warehouse.lakestore import open_lake
from pipeline.warehouse.manifest import from_json

QUARANTINE_TABLE = "quarantine"


@dataclass
class StreamStatus:
    stream: str
    cursor: datetime | None = None  # where the next window starts (minus the lookback); None: the beginning
    position: int | None = None  # streams read from an ordered log (the certificate inbox): its sequence
    last_load_at: datetime | None = None  # the last load that fetched (a reset is not one)
    last_run_id: str | None = None
    last_rows: int = 0  # rows that load fetched, over its tables (quarantine rows apart)
    last_quarantined: int = 0  # records that load quarantined
    quarantined: int = 0  # records quarantined by every load of the stream
    loads: int = 0
    last_reset_at: datetime | None = None


def stream_statuses(location: LakeLocation) -> list[StreamStatus]:
    """Every stream that has committed a load, replaying the manifests in commit order (a local lake or an
    s3:// one)."""
    streams: dict[str, StreamStatus] = {}
    lake = open_lake(location)
    for _, ref in list_manifests(lake):
        plan, outcome = from_json(read_manifest(lake, ref), ref.where)
        status = streams.setdefault(plan.stream, StreamStatus(plan.stream))
        status.cursor, status.position = outcome.cursor_after, outcome.position_after
        if plan.cursor_reset:
            status.last_reset_at = plan.loaded_at
            continue
        fetched = {name: stats.fetched for name, stats in outcome.tables.items()}
        quarantined = fetched.pop(QUARANTINE_TABLE, 0)
        status.loads += 1
        status.quarantined += quarantined
        status.last_load_at, status.last_run_id = plan.loaded_at, plan.run_id
        status.last_rows, status.last_quarantined = sum(fetched.values()), quarantined
    return sorted(streams.values(), key=lambda s: s.stream)
