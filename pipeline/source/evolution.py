"""Fields the models do not declare, as the run's schema contract says (pipeline/contract/evolution.py): every
decoded page passes here on the client's event loop, after the decoders and the page cache (a cached page never
depends on what the warehouse discovered since) and before it is counted and emitted.

The usual page costs a null count per batch: a table without discovered columns whose `extra` is all null passes
untouched, so the decoders' fast path stays what it is. A table with discovered columns gets them as null columns
on a batch without unknown fields. Only a batch carrying unknown fields is read row by row, from its `extra` JSON:

- a value for a known column (declared or discovered) moves into it when the column holds its type; a value of
  another type quarantines its record (and a child row's, its parent record with all its children), the field named;
- an unknown field under `evolve` becomes a column: named by the naming rule, typed from the values of the batch
  (contract/evolution.py `common_type`); one whose name cannot be a column (taken, reserved, not an identifier),
  or that only ever came null, stays in `extra`; under `discard_value` every unknown field stays there; under
  `freeze` the stream fails, naming the fields.

A row whose extras changed keeps what stays in `extra` keyed by dotted API path, leaf by leaf.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from pipeline.contract.columns import EXTRA_COLUMN
from pipeline.contract.evolution import (
    ARROW_TYPES,
    ColumnType,
    DiscoveredColumn,
    SchemaPolicy,
    column_name,
    common_type,
    evolved_spec,
    holds,
    usable_name,
    value_type,
)
from pipeline.contract.tables import BUILDS, QUARANTINE, TABLES, ChildTable, RecordTable, TableSpec, quarantine_batch
from pipeline.source.decoding import Batch, Page, QuarantineRow, quarantined_row, split_json_array
from pipeline.source.errors import SchemaContractError
from pipeline.source.stats import RunStats

log = logging.getLogger("lessonsync.source")

Path = tuple[str, ...]  # API names, outermost first


@dataclass
class _Table:
    """One table's schema as this run knows it: declared columns, then the discovered ones by API path."""

    name: str
    columns: dict[Path, DiscoveredColumn]
    spec: TableSpec

    def add(self, column: DiscoveredColumn) -> None:
        self.columns[tuple(column.api_path.split("."))] = column
        self.spec = evolved_spec(TABLES[self.name], list(self.columns.values()))

    def column_at_or_above(self, path: Path) -> tuple[Path, DiscoveredColumn] | None:
        """The discovered column at `path` or at one of its parents (an object where that column is a value)."""
        for depth in range(len(path), 0, -1):
            found = self.columns.get(path[:depth])
            if found is not None:
                return path[:depth], found
        return None

    def has_columns_below(self, path: Path) -> bool:
        return any(len(known) > len(path) and known[: len(path)] == path for known in self.columns)


@dataclass
class _Conflict:
    row: int
    path: Path
    value: Any
    column: DiscoveredColumn | None  # None: a value where the schema has an object
    object_sent: bool = False  # an object where `column` holds a value


@dataclass
class _Read:
    """What the schema step found in one batch's rows."""

    batch: Batch
    table: _Table
    values: dict[str, dict[int, Any]] = field(default_factory=dict)  # column -> row -> value
    extras: dict[int, str | None] = field(default_factory=dict)  # row -> its new `extra` (changed rows only)
    conflicts: list[_Conflict] = field(default_factory=list)


class SchemaEvolution:
    """The schema step of one client (one run): `apply` to each decoded page; what it added is in each stream
    run's statistics (RunStats.new_columns)."""

    def __init__(self, policy: SchemaPolicy) -> None:
        self.policy = policy
        self._tables: dict[str, _Table] = {}
        self._kept: set[tuple[str, Path]] = set()  # unknown fields left in `extra` and said so once

    def table(self, name: str) -> _Table:
        if name not in self._tables:
            columns = {tuple(c.api_path.split(".")): c for c in self.policy.columns(name)}
            self._tables[name] = _Table(name, columns, self.policy.spec(name))
        return self._tables[name]

    def apply(self, page: Page, stats: RunStats) -> Page:
        """The page with every batch in its table's schema, unknown fields placed, conflicting records quarantined."""
        body, page.body = page.body, None
        data = [b for b in page.batches if b.table.name in BUILDS]
        if not any(self.table(b.table.name).columns or has_extras(b.records) for b in data):
            return page
        reads = [self._read(batch, page, stats) for batch in data]
        quarantined = self._quarantine(page, reads, body)
        kept_rows = _kept_rows(reads, {row for row, _ in quarantined})
        batches = [_built(read, kept_rows.get(id(read))) for read in reads]
        batches = [b for b in batches if b.records.num_rows]
        batches += [b for b in page.batches if b.table.name not in BUILDS]  # the decoders' quarantine rows
        if quarantined:
            rows = [row for _, row in quarantined]
            batches.append(Batch(QUARANTINE, quarantine_batch(rows), page.location.endpoint, page.location.page))
            for row in rows:
                log.warning(
                    "quarantined record %d of %s (%s): %s", row.record_index, page.location, row.stream, row.message
                )
        own = next((b.records for b in batches if isinstance(BUILDS.get(b.table.name), RecordTable)), None)
        page.batches, page.own, page.positions = batches, own, None
        page.records = 0 if own is None else own.num_rows
        page.quarantined += len(quarantined)
        return page

    # -- reading a batch --------------------------------------------------------------------------------------

    def _read(self, batch: Batch, page: Page, stats: RunStats) -> _Read:
        table = self.table(batch.table.name)
        read = _Read(batch, table)
        if not has_extras(batch.records):
            return read
        index = batch.records.schema.get_field_index(EXTRA_COLUMN)
        unknown: dict[Path, list[tuple[int, Any]]] = {}
        leaves_of: dict[int, list[tuple[Path, Any]]] = {}
        for row, text in enumerate(batch.records.column(index).to_pylist()):
            if text is None:
                continue
            leaves = leaves_of[row] = list(_leaves(orjson.loads(text)))
            for path, value in leaves:
                self._place(read, row, path, value, unknown)
        contract = self.policy.contract(table.name)
        if unknown and contract == "freeze":
            raise SchemaContractError(
                self.policy.stream(table.name), table.name, [".".join(p) for p in unknown], str(page.location)
            )
        if unknown and contract == "evolve":
            for path, values in unknown.items():
                self._evolve(read, path, values, page, stats)
        placed = {(c.row, c.path) for c in read.conflicts}
        for row, leaves in leaves_of.items():
            rest = {
                ".".join(path): value for path, value in leaves if (row, path) not in placed and _stays(read, row, path)
            }
            if len(rest) != len(leaves):
                read.extras[row] = orjson.dumps(rest).decode() if rest else None
        return read

    def _place(self, read: _Read, row: int, path: Path, value: Any, unknown: dict[Path, list[tuple[int, Any]]]) -> None:
        """One leaf of a row's extras: into its column, a conflict, dropped (a null object of known columns), or
        unknown (left to the contract)."""
        table = read.table
        found = table.column_at_or_above(path)
        if found is not None:
            at, column = found
            if at == path and holds(column.type, value):
                read.values.setdefault(column.column, {})[row] = value
            else:  # a value of another type, or an object where the column holds a value
                read.conflicts.append(_Conflict(row, at, value, column, object_sent=at != path))
        elif table.has_columns_below(path):
            if value is not None:  # a value where the schema has an object
                read.conflicts.append(_Conflict(row, path, value, None))
            # null: the object is absent, its columns null (nothing to place)
        else:
            unknown.setdefault(path, []).append((row, value))

    def _evolve(self, read: _Read, path: Path, values: list[tuple[int, Any]], page: Page, stats: RunStats) -> None:
        """A new column for an unknown field when it can be one, and its values placed."""
        table = read.table
        if table.column_at_or_above(path) or table.has_columns_below(path):
            for row, value in values:  # a column found earlier in this batch holds its parent or children
                self._place(read, row, path, value, {})
            return
        name = column_name(path)
        kind = common_type(t for _, value in values if (t := value_type(value)) is not None)
        if kind is None:  # only ever null so far: no type to give it; it stays in `extra`
            return
        if not usable_name(name) or name in table.spec.schema.names:
            if (table.name, path) not in self._kept:
                self._kept.add((table.name, path))
                why = "taken by another column" if usable_name(name) else "not a usable column name"
                log.warning(
                    "%s: field %s of %s records stays in the rows' extra column: its column name %r is %s",
                    self.policy.stream(table.name), ".".join(path), table.name, name, why,
                )  # fmt: skip
            return
        column = DiscoveredColumn(table.name, name, ".".join(path), kind)
        table.add(column)
        stats.new_columns.append(column)
        log.info(
            "%s: %s, first met in %s; the load that commits it records it",
            self.policy.stream(table.name), column.summary(), page.location,
        )  # fmt: skip
        for row, value in values:
            self._place(read, row, path, value, {})

    # -- quarantine ------------------------------------------------------------------------------------------

    def _quarantine(
        self, page: Page, reads: list[_Read], body: bytes | None
    ) -> list[tuple[tuple[str, int], QuarantineRow]]:
        """The records to set aside, as ((own table, row), quarantine row): a conflicting row of the page's own
        table, or the parent of a conflicting child row, once each, in page order."""
        own = next((r for r in reads if isinstance(BUILDS[r.table.name], RecordTable)), None)
        if own is None or not any(r.conflicts for r in reads):
            return []
        first: dict[int, tuple[str, _Conflict]] = {}
        for read in reads:
            prefix = "" if read is own else f"{read.table.name}."
            parents = _parent_rows(own, read) if read is not own else None
            for conflict in read.conflicts:
                row = conflict.row if parents is None else parents[conflict.row]
                first.setdefault(row, (prefix, conflict))
        records = _RawRecords(body, page.positions)
        found = []
        for row in sorted(first):
            prefix, conflict = first[row]
            index = records.index(row)
            found.append(((own.table.name, row), _row(page, index, prefix, conflict, records.text(index))))
        return found


def has_extras(records: pa.RecordBatch) -> bool:
    """Whether some row of `records` has fields the models do not declare (one null count)."""
    index = records.schema.get_field_index(EXTRA_COLUMN)
    return bool(index >= 0 and records.column(index).null_count < records.num_rows)


def _leaves(extras: dict[str, Any]) -> Iterator[tuple[Path, Any]]:
    """(API path, value) of every leaf of a row's extras (keyed by dotted path; objects flattened, empty ones
    dropped as the naming rule leaves them without a column)."""
    for key, value in extras.items():
        yield from _flatten(tuple(key.split(".")), value)


def _flatten(path: Path, value: Any) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _flatten((*path, key), inner)
    else:
        yield path, value


def _stays(read: _Read, row: int, path: Path) -> bool:
    """Whether a leaf stays in `extra`: no column took it and it is not the null of an object that has columns."""
    table = read.table
    found = table.column_at_or_above(path)
    if found is not None and found[0] == path:
        return False
    return not (found is None and table.has_columns_below(path))


def _parent_rows(own: _Read, child: _Read) -> list[int]:
    """For each row of a child batch, the row of its parent in the page's own batch (by the parent key)."""
    spec = BUILDS[child.table.name]
    assert isinstance(spec, ChildTable)
    parent_columns = [own.batch.records.column(source).to_pylist() for source, _ in spec.parent_key]
    child_columns = [child.batch.records.column(target).to_pylist() for _, target in spec.parent_key]
    where = {key: row for row, key in enumerate(zip(*parent_columns, strict=True))}
    return [where[key] for key in zip(*child_columns, strict=True)]


def _kept_rows(reads: list[_Read], quarantined: set[tuple[str, int]]) -> dict[int, pa.Array | None]:
    """Per batch read (by id), the indices of the rows that stay; None when all do."""
    own = next((r for r in reads if isinstance(BUILDS[r.table.name], RecordTable)), None)
    if own is None or not quarantined:
        return {}
    gone = {row for table, row in quarantined if table == own.table.name}
    kept: dict[int, pa.Array | None] = {}
    for read in reads:
        rows = range(read.batch.records.num_rows)
        parents = _parent_rows(own, read) if read is not own else list(rows)
        kept[id(read)] = pa.array([r for r in rows if parents[r] not in gone], type=pa.int64())
    return kept


def _built(read: _Read, kept: pa.Array | None) -> Batch:
    """The batch in its table's schema now: its own columns, `extra` as read, each discovered column's values."""
    records, spec = read.batch.records, read.table.spec
    rows, present = records.num_rows, records.schema.names
    arrays = list(records.columns)  # the batch's own columns are the spec's first ones (the decoders' schema)
    if read.extras:
        old = arrays[present.index(EXTRA_COLUMN)].to_pylist()
        extra = pa.array([read.extras.get(r, old[r]) for r in range(rows)], type=pa.string())
        arrays[present.index(EXTRA_COLUMN)] = extra
    for f in list(spec.schema)[len(present) :]:
        arrays.append(_column_array(read.values.get(f.name), rows, read.table, f.name))
    batch = pa.RecordBatch.from_arrays(arrays, schema=spec.schema)
    if kept is not None and len(kept) < rows:
        batch = batch.take(kept)
    return Batch(spec, batch, read.batch.endpoint, read.batch.page)


def _column_array(values: dict[int, Any] | None, rows: int, table: _Table, name: str) -> pa.Array:
    kind: ColumnType = next(c.type for c in table.columns.values() if c.column == name)
    if not values:
        return pa.nulls(rows, type=ARROW_TYPES[kind])
    if kind == "JSON":
        return pa.array([_json(values.get(r)) for r in range(rows)], type=pa.string())
    return pa.array([values.get(r) for r in range(rows)], type=ARROW_TYPES[kind])


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


class _RawRecords:
    """The records of a page body as served, parsed once, for the quarantine rows' `raw`."""

    def __init__(self, body: bytes | None, positions: Sequence[int] | None) -> None:
        self._body, self._positions = body, positions
        self._records: list[Any] | None = None

    def index(self, row: int) -> int:
        return row if self._positions is None else self._positions[row]

    def text(self, index: int) -> str:
        if self._body is None:
            return "null"  # not kept: cannot happen for a page with unknown fields (fetching.py keeps its body)
        if self._records is None:
            try:
                self._records = orjson.loads(self._body)
            except orjson.JSONDecodeError:  # a record the parser refuses elsewhere in the page: item by item
                self._records = [item.decode("utf-8", errors="replace") for item in split_json_array(self._body) or []]
        record = self._records[index]
        return record if isinstance(record, str) else orjson.dumps(record).decode()


def _row(page: Page, index: int, prefix: str, conflict: _Conflict, raw: str) -> QuarantineRow:
    field_path = prefix + ".".join(conflict.path)
    got = "an object" if conflict.object_sent else _kind(conflict.value)
    if conflict.column is None:
        what = f"{got} where the schema has an object"
    else:
        where = f"lms.{conflict.column.table}.{conflict.column.column}"
        what = f"{got} where column {where} is {conflict.column.type}"
    shown = "" if conflict.object_sent or isinstance(conflict.value, list) else f" (got {conflict.value!r:.60})"
    return quarantined_row(page.location, index, field_path, f"{field_path}: {what}{shown}", raw)


def _kind(value: Any) -> str:
    kind = value_type(value)
    names = {"BOOLEAN": "a boolean", "BIGINT": "an integer", "DOUBLE": "a number", "VARCHAR": "a string"}
    return names.get(kind or "", "an array" if kind == "JSON" else "a value")
