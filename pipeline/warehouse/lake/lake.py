"""The immutable Parquet lake: parts written once per (table, load), made visible only when whole, and one
JSON manifest per committed load under _loads/ (see manifest.py), written once and only after every part it
names is stored. Where the bytes live (a directory or an S3-compatible bucket) is lakestore.py's concern.

Layout:  <lake>/<table>/loaded_date=YYYY-MM-DD/<load_id>/part-000000.parquet
         <lake>/_loads/<seq:010d>-<load_id>.json
Parts of a load that never committed (crash, exception) have no manifest: nothing reads them.
"""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.warehouse import hooks
from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.lake.lakestore import LakeStore, open_lake
from pipeline.warehouse.lake.manifest import PartFile

__all__ = ["ManifestRef", "PartWriter", "check_parts", "list_manifests", "load_dir", "manifest_name", "read_manifest"]

_MANIFEST_NAME = re.compile(r"^(?P<seq>\d{10})-(?P<load_id>.+)\.json$")
LakeLocation = LakeStore | Path | str


class ManifestRef(str):
    """A committed manifest's file name (a str), remembering where it is for messages."""

    where: str

    def __new__(cls, name: str, where: str) -> ManifestRef:
        ref = super().__new__(cls, name)
        ref.where = where
        return ref

    @property
    def name(self) -> str:
        return str(self)


def load_dir(table: str, started_at: datetime, load_id: str) -> str:
    """The lake-relative folder of one table's parts in one load."""
    return f"{table}/loaded_date={started_at.date().isoformat()}/{load_id}"


def manifest_name(seq: int, load_id: str) -> str:
    return f"{seq:010d}-{load_id}.json"


def list_manifests(lake: LakeLocation) -> list[tuple[int, ManifestRef]]:
    """Committed loads as (seq, manifest name), in commit order."""
    store = open_lake(lake)
    found: dict[int, ManifestRef] = {}
    for name in store.manifest_names():
        match = _MANIFEST_NAME.match(name)
        if match is None:
            continue  # temp files of an interrupted manifest write
        seq = int(match["seq"])
        ref = ManifestRef(name, str(store.manifest_location(name)))
        if seq in found:
            raise LakeError(
                f"two manifests claim load {seq}: {found[seq].where} and {ref.where}; keep the one "
                "listed in lms._load_runs (or the older one) and move the other out of the lake."
            )
        found[seq] = ref
    return sorted(found.items())


def read_manifest(lake: LakeLocation, ref: ManifestRef) -> bytes:
    return open_lake(lake).read_manifest(ref.name)


def check_parts(
    lake: LakeLocation, parts: tuple[PartFile, ...], manifest: str, conn: duckdb.DuckDBPyConnection | None = None
) -> list[str]:
    """What read_parquet takes for `parts`, after checking each is there with the size its manifest
    recorded; `conn` is made able to read them."""
    store = open_lake(lake)
    readable = []
    for part in parts:
        size = store.part_size(part.path)
        if size != part.bytes:
            state = "is missing" if size is None else f"has {size} bytes, not {part.bytes}"
            raise LakeError(
                f"lake part {store.readable(part.path)} of {manifest} {state}: the lake is damaged. "
                "Restore the file from a backup; without it the warehouse cannot be rebuilt exactly."
            )
        readable.append(store.readable(part.path))
    if conn is not None and readable:
        store.attach(conn)
    return readable


class PartWriter:
    """Appends record batches of one table in one load to Parquet parts, bounded in memory: batches are
    buffered up to `row_group_rows` rows, and a part is closed (and published: fsync + rename, or upload)
    every `part_rows` rows.

    A full buffer is encoded and compressed in a background thread (one row group at a time per writer, in
    order), so `write` returns at once: the thread that feeds it (a fetch draining the client's bounded
    queue) would otherwise stop for the whole row group (~80 ms for 131k rows of answers), long enough for
    the queue to fill and the requests in flight to stop. Arrow releases the GIL while it writes. At most one
    row group is being written while the next fills: the buffer bound is two row groups, not one. A full part is
    closed and published in the background too (after its last row group, parts in order), so the feeding thread
    never waits for a row group and an fsync."""

    def __init__(
        self, lake: LakeStore, directory: str, schema: pa.Schema, *, part_rows: int, row_group_rows: int
    ) -> None:
        self.lake = lake
        self.directory = directory
        self.schema = schema
        self.part_rows = part_rows
        self.row_group_rows = min(row_group_rows, part_rows)  # a row group never spans two parts
        self.parts: list[PartFile] = []
        self.rows = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer: pq.ParquetWriter | None = None
        self._writing: Future[None] | None = None  # the row group being written in the background
        self._spooled: Path | None = None
        self._rows_in_part = 0
        self._started_parts = 0
        self._closing: Future[None] | None = None  # the last part being closed and published in the background

    def write(self, batch: pa.RecordBatch) -> None:
        """Row groups hold exactly `row_group_rows` rows (a batch is sliced at the boundary, without a copy), so a
        part of whole DuckDB row groups inserts into whole row groups (loading/early_insert.py)."""
        while batch.num_rows:
            piece = batch.slice(0, self.row_group_rows - self._buffered)
            batch = batch.slice(piece.num_rows)
            self._buffer.append(piece)
            self._buffered += piece.num_rows
            self.rows += piece.num_rows
            if self._buffered >= self.row_group_rows:
                self._flush()

    def flush(self) -> None:
        """Write the buffered rows out now (as the current part's last row group so far; the part stays open)."""
        self._flush()

    def finish(self) -> tuple[PartFile, ...]:
        self._flush()
        self._close_part()
        self._closed()
        if self.parts:
            self.lake.sync_directory(self.directory)
        every = tuple(self.schema.names)  # a part written before a widen() names its fewer columns
        return tuple(replace(part, columns=None if part.columns == every else part.columns) for part in self.parts)

    def widen(self, schema: pa.Schema) -> None:
        """Write the rows from now on with `schema`, the current one with columns appended (the load discovered a
        column): the rows buffered so far end the current part, which keeps its columns (PartFile.columns)."""
        self._flush()
        self._close_part()
        self.schema = schema

    def discard(self) -> None:
        """Forget everything this writer wrote (the load is abandoned)."""
        with suppress(Exception):  # a failed row-group write or publish: its part is being thrown away anyway
            self._written()
        with suppress(Exception):
            self._closed()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._spooled is not None:
            self._spooled.unlink(missing_ok=True)
        self.lake.remove_directory(self.directory)

    def _flush(self) -> None:
        if not self._buffered:
            return
        group = pa.Table.from_batches(self._buffer, schema=self.schema)
        self._buffer, self._buffered = [], 0
        self._written()  # the previous row group: one at a time, in order
        if self._writer is None:
            self._spooled = self.lake.spool_path(self.directory, self._part_name(self._started_parts))
            self._started_parts += 1
            self._writer = pq.ParquetWriter(self._spooled, self.schema, compression="zstd")
        self._writing = _ROW_GROUPS.submit(_write_row_group, self._writer, group)
        self._rows_in_part += group.num_rows
        if self._rows_in_part >= self.part_rows:
            self._close_part()

    def _written(self) -> None:
        """Wait for the row group being written; its error, if any, is raised here."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def _closed(self) -> None:
        """Wait for the parts being closed; the error of one, if any, is raised here."""
        closing, self._closing = self._closing, None
        if closing is not None:
            closing.result()

    def _close_part(self) -> None:
        if self._writer is None or self._spooled is None:
            self._written()
            return
        columns = tuple(self._writer.schema.names)
        part = (self._writer, self._spooled, self._part_name(self._started_parts - 1), self._rows_in_part, columns)
        self._writer, self._spooled, self._rows_in_part = None, None, 0
        # self._writing stays: the next part's first row group waits for this part's last, as any row group does
        self._closing = _PUBLISHING.submit(self._publish, *part, self._writing, self._closing)

    def _publish(
        self,
        writer: pq.ParquetWriter,
        spooled: Path,
        name: str,
        rows: int,
        columns: tuple[str, ...],
        last_row_group: Future[None] | None,
        previous_part: Future[None] | None,
    ) -> None:
        try:
            if previous_part is not None:
                previous_part.result()  # done already (one thread, in order); its error stops the ones after it
            if last_row_group is not None:
                last_row_group.result()
            writer.close()
        except BaseException:
            # The part is never published; its spool (a temp file of the S3 lake's) must not outlive the load. Its
            # last row group is waited for first: closing the writer under it would fail that write instead.
            with suppress(Exception):
                if last_row_group is not None:
                    last_row_group.result()
            with suppress(Exception):
                writer.close()
            spooled.unlink(missing_ok=True)
            raise
        size = self.lake.publish_part(spooled, self.directory, name)
        self.parts.append(PartFile(f"{self.directory}/{name}", rows, size, columns))
        hooks.reached("part_stored")
        hooks.reached(f"part_stored:{self.directory.split('/')[0]}")

    @staticmethod
    def _part_name(number: int) -> str:
        return f"part-{number:06d}.parquet"


def _write_row_group(writer: pq.ParquetWriter, group: pa.Table) -> None:
    writer.write_table(group)
    # Encoding a row group (dictionaries, pages) takes tens of MiB of scratch, which Arrow's pool would keep
    # resident for the next one, per table of the load: handed back at once instead (it is cheap).
    pa.default_memory_pool().release_unused()


# DuckDB's rows per row group (its default `row_group_size`). A lake row group is half of one, which bounds what a
# table buffers, and parts of an even number of them insert into whole DuckDB row groups.
DUCKDB_ROW_GROUP_ROWS = 122_880
LAKE_ROW_GROUP_ROWS = DUCKDB_ROW_GROUP_ROWS // 2

# Row groups written in the background (PartWriter): two threads, so the tables of a load (answers and
# their results) and the loads fetched at once are written side by side; each writer has one at a time.
_ROW_GROUPS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lessonsync-lake")
# Full parts closed and published (fsync + rename, or upload), one at a time, in the order they were closed: a
# part waits there for its last row group (written by _ROW_GROUPS, which never waits for this one).
_PUBLISHING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lessonsync-publish")
