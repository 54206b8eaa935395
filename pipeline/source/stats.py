"""What one stream run did, for Dagster metadata and logs: requests, retries, pages, rows per table,
quarantined records, new fields the platform added, sweep passes, whether the result is complete, the server
time it started and the newest lastDate it listed (the two clocks the cursor rule of pipeline/raw/windows.py weighs).

New fields (schema drift the platform introduces: fields our models do not declare) that stay in each row's
`extra` (JSON keyed by API path, pipeline/contract/columns.py) are counted here per table and path, so a run can
report them; those that became columns (pipeline/source/evolution.py) are listed in `new_columns`.

Progress of long streams is logged on "lessonsync.source": pages, rows and rate, every N pages or seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.contract.columns import EXTRA_COLUMN
from pipeline.contract.evolution import DiscoveredColumn
from pipeline.source.decoding import Page
from pipeline.source.transport import TransportStats

log = logging.getLogger("lessonsync.source")


@dataclass
class RunStats:
    stream: str
    requests: int = 0
    retries: int = 0
    pages: int = 0
    pages_from_cache: int = 0  # pages served byte for byte as before, not decoded again (page_cache.py)
    records: int = 0  # valid records of the stream's own table (before any dedupe by key)
    rows: dict[str, int] = field(default_factory=dict)  # rows yielded per table
    quarantined: int = 0
    new_fields: dict[str, int] = field(default_factory=dict)  # "table.api.path" -> records with that new field
    # columns this run added for fields the platform began sending (source/evolution.py); the commit records them
    new_columns: list[DiscoveredColumn] = field(default_factory=list)
    passes: int = 0  # sweeps of the window (more than 1 when page drift was seen)
    complete: bool = True  # False: drift persisted; do not advance the cursor past this window
    planned_requests: int = 0  # answers: requests in the plan (before re-sweeps)
    server_time_at_start: datetime | None = None  # platform clock when the run started (Date header)
    newest_last_date: datetime | None = None  # greatest cursor value (lastDate) listed; answers: of the plan
    duration_s: float = 0.0
    _transport: Any = field(default=None, repr=False)
    _start_counts: tuple[int, int] = (0, 0)
    _started: float = 0.0

    @classmethod
    def begin(cls, stream: str, transport: TransportStats) -> RunStats:
        return cls(
            stream,
            _transport=transport,
            _start_counts=(transport.requests, transport.retries),
            _started=time.monotonic(),
        )

    def note_page(self, page: Page) -> None:
        self.pages += 1
        self.pages_from_cache += page.from_cache
        self.records += page.records
        self.quarantined += page.quarantined
        for batch in page.batches:
            self.rows[batch.table.name] = self.rows.get(batch.table.name, 0) + batch.records.num_rows
            count_new_fields(batch.table.name, batch.records, self.new_fields)
        own = page.own
        cursor_field = page.batches[0].table.cursor_field if own is not None else None
        if own is not None and cursor_field is not None:
            self.note_newest(pc.max(own.column(cursor_field)).as_py())

    def note_newest(self, instant: datetime | None) -> None:
        if instant is not None:
            instant = instant.astimezone(UTC)
            if self.newest_last_date is None or instant > self.newest_last_date:
                self.newest_last_date = instant

    def finish(self) -> RunStats:
        if self._transport is not None:
            self.requests = self._transport.requests - self._start_counts[0]
            self.retries = self._transport.retries - self._start_counts[1]
        self.duration_s = time.monotonic() - self._started
        return self

    def as_metadata(self) -> dict[str, Any]:
        """Plain values (no private fields), e.g. for Dagster materialization metadata."""
        values = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        values["new_columns"] = [column.summary() for column in self.new_columns]
        for name in ("server_time_at_start", "newest_last_date"):
            instant = values[name]
            values[name] = instant.isoformat() if instant is not None else None
        return values


def count_new_fields(table: str, records: pa.RecordBatch, counts: dict[str, int]) -> None:
    """Add to `counts` ("table.api.path" -> records carrying it) the new fields of `records`.

    Free for the usual page: a batch whose `extra` column is all null is skipped on Arrow's null count."""
    index = records.schema.get_field_index(EXTRA_COLUMN)
    if index < 0:
        return
    column = records.column(index)
    if column.null_count == len(column):
        return
    for text in column.to_pylist():
        if text:
            for path in orjson.loads(text):
                name = f"{table}.{path}"
                counts[name] = counts.get(name, 0) + 1


def paths_of(table: str, counts: dict[str, int]) -> list[str]:
    """The new field paths seen in `table`, sorted."""
    prefix = f"{table}."
    return sorted(name[len(prefix) :] for name in counts if name.startswith(prefix))


class Progress:
    def __init__(self, stream: str, *, every_pages: int = 100, every_seconds: float = 10.0) -> None:
        self._stream = stream
        self._every_pages, self._every_seconds = every_pages, every_seconds
        self._started = self._last_report = time.monotonic()
        self.pages = self.rows = 0

    def page(self, rows: int) -> None:
        self.pages += 1
        self.rows += rows
        now = time.monotonic()
        if self.pages % self._every_pages == 0 or now - self._last_report >= self._every_seconds:
            self._last_report = now
            self.report("progress")

    def report(self, what: str) -> None:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        log.info(
            "%s %s: %d pages, %d records, %.0f records/s, %.1f pages/s",
            self._stream,
            what,
            self.pages,
            self.rows,
            self.rows / elapsed,
            self.pages / elapsed,
        )
