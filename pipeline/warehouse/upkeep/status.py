"""What each stream's state is, read from the lake's load manifests alone: readable while a sync holds the
DuckDB file (the manifests are written atomically, one per committed load, and never change); and how many rows
each table holds now (the warehouse read-only, else the published snapshot's copy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.connection import scalar
from pipeline.warehouse.duck.tabledef import SCHEMA
from pipeline.warehouse.lake.lake import LakeLocation, list_manifests, read_manifest
from pipeline.warehouse.lake.lakestore import open_lake
from pipeline.warehouse.lake.manifest import from_json

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
    tables: tuple[str, ...] = ()  # the tables its loads wrote (quarantine apart), in the order first written
    # columns its loads added for fields the platform began sending: "new column `t.c` TYPE (field f), first seen in
    # load N" (contract/evolution.py)
    new_columns: list[str] = field(default_factory=list)


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
        status.new_columns += [column.committed(plan.seq, plan.loaded_at).summary() for column in plan.discovered]
        fetched = {name: stats.fetched for name, stats in outcome.tables.items()}
        quarantined = fetched.pop(QUARANTINE_TABLE, 0)
        status.tables += tuple(name for name in fetched if name not in status.tables)
        status.loads += 1
        status.quarantined += quarantined
        status.last_load_at, status.last_run_id = plan.loaded_at, plan.run_id
        status.last_rows, status.last_quarantined = sum(fetched.values()), quarantined
    return sorted(streams.values(), key=lambda s: s.stream)


@dataclass
class TableRows:
    """Rows of each table of schema lms right now (or, while a sync holds the warehouse, as last published)."""

    rows: dict[str, int]
    source: str  # "warehouse", "published snapshot (<when>)", or why there are none


def live_table_rows(warehouse: Path, snapshot: Path) -> TableRows:
    """count(*) of every lms table, read-only from the warehouse; when a sync holds it (DuckDB lets no other
    process open a file being written), from the published snapshot's copy of the raw tables."""
    for path, source in ((warehouse, "warehouse"), (snapshot, "published snapshot")):
        if not path.exists():
            continue
        try:
            with duckdb.connect(str(path), read_only=True) as conn:
                tables = [  # views over Parquet files in the published snapshot
                    name
                    for (name,) in conn.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
                        "AND table_schema = ? AND NOT starts_with(table_name, '_') ORDER BY table_name",
                        [SCHEMA],
                    ).fetchall()
                ]
                rows = {name: int(scalar(conn, f"SELECT count(*) FROM {SCHEMA}.{q(name)}")) for name in tables}
                if source != "warehouse":
                    published = conn.execute("SELECT max(published_at) FROM main._published").fetchall()
                    source = f"{source} of {published[0][0].astimezone(UTC).isoformat(timespec='seconds')}"
            return TableRows(rows, source)
        except duckdb.Error as error:
            if path == snapshot:
                return TableRows({}, f"unreadable: {str(error).splitlines()[0]}")
    return TableRows({}, "no warehouse yet")
