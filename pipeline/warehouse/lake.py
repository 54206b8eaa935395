"""The immutable Parquet lake: parts written once per (table, load), made visible by an atomic rename
after fsync, and one JSON manifest per committed load under _loads/ (see manifest.py).

Layout:  <lake>/<table>/loaded_date=YYYY-MM-DD/<load_id>/part-000000.parquet
         <lake>/_loads/<seq:010d>-<load_id>.json
Parts of a load that never committed (crash, exception) have no manifest: nothing reads them.
"""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.manifest import PartFile

MANIFESTS = "_loads"
_MANIFEST_NAME = re.compile(r"^(?P<seq>\d{10})-(?P<load_id>.+)\.json$")


def load_dir(lake_dir: Path, table: str, started_at: datetime, load_id: str) -> Path:
    return lake_dir / table / f"loaded_date={started_at.date().isoformat()}" / load_id


def manifest_path(lake_dir: Path, seq: int, load_id: str) -> Path:
    return lake_dir / MANIFESTS / f"{seq:010d}-{load_id}.json"


def list_manifests(lake_dir: Path) -> list[tuple[int, Path]]:
    """Committed loads as (seq, manifest path), in commit order."""
    directory = lake_dir / MANIFESTS
    if not directory.is_dir():
        return []
    found: dict[int, Path] = {}
    for path in directory.iterdir():
        match = _MANIFEST_NAME.match(path.name)
        if match is None:
            continue  # temp files of an interrupted manifest write
        seq = int(match["seq"])
        if seq in found:
            raise LakeError(f"two manifests claim load {seq}: {found[seq]} and {path}; keep the one listed in "
                            "lms._load_runs (or the older one) and move the other out of the lake.")
        found[seq] = path
    return sorted(found.items())


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see either nothing or all of it, even after a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_parts(lake_dir: Path, parts: tuple[PartFile, ...], manifest: str) -> list[str]:
    """Absolute paths of `parts`, after checking each is there with the size its manifest recorded."""
    paths = []
    for part in parts:
        path = lake_dir / part.path
        size = path.stat().st_size if path.exists() else None
        if size != part.bytes:
            state = "is missing" if size is None else f"has {size} bytes, not {part.bytes}"
            raise LakeError(f"lake part {path} of {manifest} {state}: the lake is damaged. Restore the file "
                            "from a backup; without it the warehouse cannot be rebuilt exactly.")
        paths.append(str(path))
    return paths


class PartWriter:
    """Appends record batches of one table in one load to Parquet parts, bounded in memory: batches are
    buffered up to `row_group_rows` rows, and a part is closed (fsync, then rename) every `part_rows` rows."""

    def __init__(self, directory: Path, lake_dir: Path, schema: pa.Schema, *, part_rows: int,
                 row_group_rows: int) -> None:
        self.directory = directory
        self.lake_dir = lake_dir
        self.schema = schema
        self.part_rows = part_rows
        self.row_group_rows = row_group_rows
        self.parts: list[PartFile] = []
        self.rows = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer: pq.ParquetWriter | None = None
        self._rows_in_part = 0

    def write(self, batch: pa.RecordBatch) -> None:
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self.rows += batch.num_rows
        if self._buffered >= self.row_group_rows:
            self._flush()

    def finish(self) -> tuple[PartFile, ...]:
        self._flush()
        self._close_part()
        if self.parts:
            fsync_dir(self.directory)
        return tuple(self.parts)

    def discard(self) -> None:
        """Forget everything this writer wrote (the load is abandoned)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def _flush(self) -> None:
        if not self._buffered:
            return
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp_path(), self.schema, compression="zstd")
        self._writer.write_table(pa.Table.from_batches(self._buffer, schema=self.schema))
        self._rows_in_part += self._buffered
        self._buffer, self._buffered = [], 0
        if self._rows_in_part >= self.part_rows:
            self._close_part()

    def _close_part(self) -> None:
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        tmp, final = self._tmp_path(), self.directory / f"part-{len(self.parts):06d}.parquet"
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        self.parts.append(PartFile(final.relative_to(self.lake_dir).as_posix(), self._rows_in_part,
                                   final.stat().st_size))
        self._rows_in_part = 0

    def _tmp_path(self) -> Path:
        return self.directory / f".part-{len(self.parts):06d}.parquet.tmp"
