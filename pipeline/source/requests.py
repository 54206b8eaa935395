"""One request of a stream (endpoint + parameters, many pages) and the batches a page turns into."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from pipeline.source.catalog import BUILDS, QUARANTINE, ChildTable, RecordTable, quarantine_batch
from pipeline.source.pages import DecodedPage, PageLocation
from pipeline.source.paths import fill_path
from pipeline.source.streams import StreamSpec
from pipeline.source.tables import TableSpec

UpdatedSinceFormat = Literal["iso8601", "iso8601-z", "epoch-ms"]
# How far from `updatedSince` a platform may draw its line: the spec shows neither the format nor whether it is
# inclusive, so an exclusive `>` or a comparison in whole seconds must lose nothing (pipeline/windows.py, A3).
UPDATED_SINCE_RESOLUTION = timedelta(seconds=1)


def format_updated_since(instant: datetime, style: UpdatedSinceFormat = "iso8601") -> str:
    """updatedSince as text. The spec does not show its format: ISO 8601 with offset by default."""
    if instant.tzinfo is None:
        raise ValueError(f"updated_since must be timezone-aware, got {instant!r}")
    utc = instant.astimezone(UTC)
    if style == "epoch-ms":  # floored: a window may start earlier, never later
        return str((utc - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1))
    text = utc.isoformat()
    return text.replace("+00:00", "Z") if style == "iso8601-z" else text


@dataclass(frozen=True)
class Request:
    """A stream request; `covers` = active-lesson records an answer listing covers (answers pager only)."""

    stream: StreamSpec
    path_values: Mapping[str, str] = field(default_factory=dict)
    updated_since: str | None = None  # already formatted
    covers: int = 0

    @property
    def endpoint(self) -> str:
        return fill_path(self.stream.path, self.path_values)

    def params(self) -> dict[str, str]:
        params = dict(self.stream.params)
        if self.updated_since is not None and self.stream.incremental:
            params["updatedSince"] = self.updated_since
        return params


@dataclass(frozen=True)
class Batch:
    """Rows of one table from one page: what the client yields to the warehouse."""

    table: TableSpec
    records: pa.RecordBatch
    endpoint: str
    page: int


@dataclass
class Page:
    """A fetched page, already Arrow: the dicts are dropped as soon as it is converted, so pages waiting
    in flight or in order hold compact columns, not Python objects (memory stays flat at scale)."""

    location: PageLocation
    served: int  # records in the page as served, valid or not (drives short-page and coverage rules)
    batches: list[Batch]  # own table, then child tables, then quarantine; empty ones left out
    records: int = 0  # valid records (rows of the own table)
    quarantined: int = 0
    key_hashes: np.ndarray | None = None  # hashes of the records' keys (drift detection of record sweeps)
    own: pa.RecordBatch | None = None  # the own table's batch, for reading ids of sub-requests


def arrow_page(request: Request, page: DecodedPage, key: Callable[[Any], Any] | None = None) -> Page:
    """Batches of a decoded page, plus key hashes when `key` (a getter on the dicts) is given."""
    batches = page_batches(request, page)
    hashes = None
    if key is not None:
        hashes = np.fromiter((hash(key(r)) for r in page.records), dtype=np.int64, count=len(page.records))
    own = batches[0].records if page.records else None
    return Page(page.location, page.served, batches, len(page.records), len(page.quarantined), hashes, own)


def page_batches(request: Request, page: DecodedPage) -> list[Batch]:
    """The page's own table, then its child tables, then its quarantine rows; empty batches are left out.

    A child batch follows its parent batch from the same page, so a warehouse that replaces all children
    of every parent key in a parent batch deletes before it inserts (a parent whose list became empty
    has no child rows; its old ones must still go).
    """
    where, stream = page.location, request.stream
    batches: list[Batch] = []
    if page.records:
        table = BUILDS[stream.table]
        assert isinstance(table, RecordTable)
        parent = table.batch(page.records, with_extras=page.with_extras)
        batches.append(Batch(table.spec, parent, where.endpoint, where.page))
        for child_name, expand in stream.children:
            rows = expand(page.records, request.path_values)
            child = BUILDS[child_name]
            assert isinstance(child, ChildTable)
            if rows:
                records = child.batch(parent, rows, with_extras=page.with_extras)
                batches.append(Batch(child.spec, records, where.endpoint, where.page))
    if page.quarantined:
        batches.append(Batch(QUARANTINE, quarantine_batch(page.quarantined), where.endpoint, where.page))
    return batches
