"""One load: batches of one or more tables written once to the lake, then committed to DuckDB together
with the stream's cursor in ONE transaction. Leaving the `with` block without commit() discards the parts;
a crash before the manifest exists leaves the warehouse and the lake's committed history untouched."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa

from pipeline.contract.evolution import DiscoveredColumn, widens
from pipeline.contract.tables import TableSpec
from pipeline.warehouse import hooks
from pipeline.warehouse.duck.schema import check_identifier, table_def
from pipeline.warehouse.errors import MemoryLimitError, WarehouseError
from pipeline.warehouse.lake.lake import PartWriter, list_manifests, load_dir
from pipeline.warehouse.lake.manifest import PartFile, TableLoad
from pipeline.warehouse.loading.batches import conform_batch
from pipeline.warehouse.loading.commit import commit_load
from pipeline.warehouse.loading.content import ContentDigest
from pipeline.warehouse.loading.links import ChildLinks
from pipeline.warehouse.loading.protocols import EarlyCommit, LoadTarget
from pipeline.warehouse.results import LoadResult

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class Load:
    """Created by Warehouse.load(); see its docstring."""

    def __init__(
        self, warehouse: LoadTarget, stream: str, run_id: str, started_at: datetime, part_rows: int | None = None
    ) -> None:
        check_identifier(stream, "stream")
        if not _RUN_ID.match(run_id):
            raise WarehouseError(
                f"run_id {run_id!r} must be 1-100 letters, digits, '.', '_' or '-' (it names "
                "lake directories); pass the Dagster run id or a similar token."
            )
        require_aware(started_at, "started_at")
        self.warehouse = warehouse
        self.stream = stream
        self.run_id = run_id
        self.started_at = started_at
        self.part_rows = part_rows or warehouse.part_rows
        self.load_id = f"{run_id}-{stream}-{secrets.token_hex(4)}"
        self._specs: dict[str, TableSpec] = {}
        self._writers: dict[str, PartWriter] = {}
        self._contents: dict[str, ContentDigest] = {}  # snapshot tables only (merge/repeats.py)
        self._state = "open"

    def __enter__(self) -> Load:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state == "open":
            self.abort()

    def write(self, spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> None:
        """Append `batch` (rows of `spec.name`) to this load's Parquet parts in the lake."""
        self._require_open()
        known = self._specs.get(spec.name)
        if known is None:
            table_def(spec)  # names and types are checked before anything is written
            self._specs[spec.name] = spec
            self._writers[spec.name] = PartWriter(
                self.warehouse.lake,
                load_dir(spec.name, self.started_at, self.load_id),
                _lake_schema(spec, self.load_id),
                part_rows=self.part_rows,
                row_group_rows=self.warehouse.row_group_rows,
            )
            if spec.kind == "snapshot":
                self._contents[spec.name] = ContentDigest(spec.schema)
        elif known != spec:
            if widens(known, spec):  # the load discovered a column: the rows from now on have it
                table_def(spec)
                self._specs[spec.name] = spec
                self._writers[spec.name].widen(_lake_schema(spec, self.load_id))
                self._contents.pop(spec.name, None)  # its rows are of two shapes: no digest to repeat
            elif widens(spec, known):  # a batch made before the discovery: its new columns null
                batch = _padded(batch, known)
                spec = known
            else:
                raise WarehouseError(
                    f"table {spec.name} was written with two different specs in load "
                    f"{self.load_id}; write each table with one spec per load (or one that only appends columns)."
                )
        content = self._contents.get(spec.name)
        for piece in conform_batch(spec, batch):
            self._writers[spec.name].write(piece)
            if content is not None:
                content.add(piece)

    def flush(self) -> None:
        """Write every table's buffered rows to its part now, so the memory they hold is free before the commit
        (which writes them anyway); more rows may be written after."""
        self._require_open()
        for writer in self._writers.values():
            writer.flush()

    def commit(
        self,
        cursor: datetime | None = None,
        complete_snapshots: Iterable[str] = (),
        replace_children_of: ChildLinks | None = None,
        stats: Mapping[str, Any] | None = None,
        *,
        cursor_reset: bool = False,
        position: int | None = None,
        drop_before: Iterable[str] = (),
        early: EarlyCommit | None = None,
        discovered: Iterable[DiscoveredColumn] = (),
    ) -> LoadResult:
        """Make everything written visible in the warehouse with the stream's new cursor, atomically.

        cursor: the stream's new cursor; the stored one only moves forward (an older one is ignored).
        complete_snapshots: tables pulled whole in this load: their rows not seen here get deleted_at.
        replace_children_of: {child: parent or ChildOf}; None = every registered child of a table
            written here (see links.py); {} = none.
        stats: JSON-serializable numbers to record with the load (requests, retries...).
        cursor_reset: store `cursor` as it is, even backwards (pipeline.warehouse.upkeep.reset; nothing else).
        position: for a stream read from an ordered log (the certificate inbox: its sequence), the position up
            to which this load holds every entry; stored in lms._sync_state.position, only ever moving forward.
        drop_before: tables dropped in this load's transaction before its rows go in, and recreated from their
            spec: a one-time adoption of tables written outside the lake, whose rows this load carries.
        early: the transaction in which this load's first load went in while it was written (early_insert.py);
            the commit finishes it.
        discovered: columns the load's specs gained for fields the platform began sending (contract/evolution.py):
            recorded in lms._discovered_columns with this load's seq, and in its manifest.
        """
        self._require_open()
        if cursor is not None:
            require_aware(cursor, "cursor")
        if position is not None and (not isinstance(position, int) or position < 0):
            raise WarehouseError(f"position of load {self.load_id} must be a non-negative int, got {position!r}.")
        drop_before = tuple(drop_before)
        for name in drop_before:
            check_identifier(name, "table")
        stats = dict(stats or {})
        try:
            json.dumps(stats)
        except (TypeError, ValueError) as error:
            raise WarehouseError(f"stats of load {self.load_id} must be JSON-serializable: {error}") from None
        self._state = "committing"
        try:
            tables = tuple(
                table_load(spec, self._writers[name].finish(), self._content(name))
                for name, spec in self._specs.items()
            )
            # The last row groups' Parquet encoding scratch (tens of MiB in Arrow's pool), back to the OS before
            # DuckDB takes its memory for the commit.
            pa.default_memory_pool().release_unused()
            hooks.reached("parts_written")
            hooks.reached(f"parts_written:{self.stream}")
            result = commit_load(
                self,
                tables,
                cursor,
                tuple(sorted(set(complete_snapshots))),
                replace_children_of,
                stats,
                cursor_reset=cursor_reset,
                position=position,
                drop_before=drop_before,
                early=early,
                discovered=tuple(discovered),
            )
        except BaseException as error:
            if not self._has_manifest():  # once the manifest exists the parts belong to a committed load
                self._discard()
            self._state = "failed"
            if isinstance(error, duckdb.OutOfMemoryException):  # outside apply_load: the plan's table changes
                limit = self.warehouse.connection_settings.memory_limit
                raise MemoryLimitError(f"committing stream {self.stream}", limit) from None
            raise
        self._state = "committed"
        return result

    def parts_written(self, table: str) -> tuple[PartFile, ...]:
        """The lake parts of `table` holding every row written to this load so far (what is buffered is
        written out first), so the uncommitted load can be read; rows written later go to further parts."""
        self._require_open()
        writer = self._writers.get(table)
        return () if writer is None else writer.finish()

    def closed_parts(self, table: str) -> tuple[PartFile, ...]:
        """The parts of `table` written whole so far (stored and final: no later row goes into them); callable
        from another thread than the one writing."""
        writer = self._writers.get(table)
        return () if writer is None else tuple(writer.parts)

    def abort(self) -> None:
        """Forget this load: its parts are removed and nothing reaches the warehouse."""
        if self._state == "committed":
            raise WarehouseError(f"load {self.load_id} is already committed; it cannot be aborted.")
        self._discard()
        self._state = "aborted"

    @property
    def specs(self) -> Mapping[str, TableSpec]:
        return dict(self._specs)

    def _content(self, table: str) -> str | None:
        content = self._contents.get(table)
        return None if content is None else content.hexdigest()

    def _has_manifest(self) -> bool:
        return any(ref.name.endswith(f"-{self.load_id}.json") for _, ref in list_manifests(self.warehouse.lake))

    def _discard(self) -> None:
        for writer in self._writers.values():
            writer.discard()

    def _require_open(self) -> None:
        if self._state != "open":
            raise WarehouseError(f"load {self.load_id} is {self._state}; start a new one with Warehouse.load().")


def require_aware(value: datetime, name: str) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise WarehouseError(f"{name} must be a timezone-aware datetime (UTC), got {value!r}.")


def table_load(spec: TableSpec, parts: tuple[PartFile, ...], content: str | None = None) -> TableLoad:
    """What the commit path knows of one table of a load: its spec's rules and the parts written."""
    return TableLoad(
        spec.name,
        spec.kind,
        tuple(spec.key),
        spec.cursor_field,
        spec.parent,
        tuple(spec.schema.names),
        parts,
        tuple(spec.order_by),
        content,
    )


def _padded(batch: pa.RecordBatch | pa.Table, spec: TableSpec) -> pa.RecordBatch | pa.Table:
    """`batch` with `spec`'s columns it lacks (appended ones) added as nulls."""
    present = set(batch.schema.names)
    columns = [
        batch.column(f.name) if f.name in present else pa.nulls(batch.num_rows, type=f.type) for f in spec.schema
    ]
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays(columns, schema=spec.schema)
    return pa.RecordBatch.from_arrays(columns, schema=spec.schema)


def _lake_schema(spec: TableSpec, load_id: str) -> pa.Schema:
    """The spec's schema, tagged so a lone Parquet file says what it is."""
    tags = {b"lessonsync.table": spec.name.encode(), b"lessonsync.load_id": load_id.encode()}
    return spec.schema.with_metadata({**(spec.schema.metadata or {}), **tags})
