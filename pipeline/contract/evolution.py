"""Columns the platform adds: a field the models do not declare becomes a typed column of its table, by the naming
rule of every column, when the schema contract of the stream that reads it says so (docs/schema-evolution.md).

Contracts, per stream (LESSONSYNC_SCHEMA_CONTRACT, LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM), as dlt's:
  evolve         the field becomes a column on the load that first sees it (the default)
  freeze         the stream fails, naming the field; nothing of it commits
  discard_value  the field stays in the row's `extra` JSON, the schema does not change

A table's schema is its declaration plus the columns discovered so far (`DiscoveredColumn`, kept in the warehouse's
lms._discovered_columns and in the load manifests), appended after `extra` in the order they were found
(`evolved_spec`). Types come from the values: bool -> BOOLEAN, int -> BIGINT, float or ints and floats -> DOUBLE,
string -> VARCHAR (ISO 8601 text too: nothing says every later value is a date-time), an array -> JSON text; a
nested object is flattened, each leaf a column named with its parent's prefix. A value of another type for a
column that exists quarantines its record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from typing import Any, Literal, get_args

import pyarrow as pa

from pipeline.contract.columns import EXTRA_COLUMN, JSON_METADATA
from pipeline.contract.tables import TABLES, TableSpec

SchemaContract = Literal["evolve", "freeze", "discard_value"]
SCHEMA_CONTRACTS: tuple[SchemaContract, ...] = get_args(SchemaContract)
DEFAULT_CONTRACT: SchemaContract = "evolve"
ColumnType = Literal["BOOLEAN", "BIGINT", "DOUBLE", "VARCHAR", "JSON"]
ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "BOOLEAN": pa.bool_(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
}
# Field metadata of a discovered column: the API path it holds, and its description once its load is known.
API_PATH_METADATA = b"lessonsync.api_path"
DESCRIPTION_METADATA = b"lessonsync.description"
# Names no discovered column may take: the warehouse's load columns and what its staging adds (warehouse tabledef).
RESERVED_NAMES = frozenset({EXTRA_COLUMN, "first_loaded_at", "last_loaded_at", "deleted_at", "file_row_number"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
_BIGINT = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class DiscoveredColumn:
    """A column of `table` that no declaration has: the API field at `api_path` (dotted) the platform began sending."""

    table: str
    column: str
    api_path: str
    type: ColumnType
    first_seen_load: int | None = None  # the load (lms._load_runs.load_seq) that added it; None until it commits
    first_seen_at: datetime | None = None

    @property
    def field(self) -> pa.Field:
        metadata = {**(JSON_METADATA if self.type == "JSON" else {}), API_PATH_METADATA: self.api_path.encode()}
        if self.first_seen_load is not None:
            metadata[DESCRIPTION_METADATA] = self.description.encode()
        return pa.field(self.column, ARROW_TYPES[self.type], metadata=metadata)

    @property
    def description(self) -> str:
        seen = f"load {self.first_seen_load}" if self.first_seen_load is not None else "this load"
        return f"field {self.api_path} the platform began sending; not in the spec; first seen in {seen}"

    def summary(self) -> str:
        """How runs, logs and `lessonsync status` name it: new column `t.c` BIGINT, first seen in load N."""
        seen = f", first seen in load {self.first_seen_load}" if self.first_seen_load is not None else ""
        return f"new column `{self.table}.{self.column}` {self.type} (field {self.api_path}){seen}"

    def committed(self, load: int, at: datetime) -> DiscoveredColumn:
        return replace(self, first_seen_load=load, first_seen_at=at)


def snake_case(api_name: str) -> str:
    """The column name of one API name: camelCase -> snake_case, leading underscores dropped (models.py)."""
    return _CAMEL.sub("_", api_name.lstrip("_")).lower()


def column_name(path: Sequence[str]) -> str:
    """The column of the API field at `path`: nested objects flattened with the parent's name as prefix."""
    return "_".join(snake_case(part) for part in path)


def usable_name(name: str) -> bool:
    return bool(_IDENTIFIER.match(name)) and name not in RESERVED_NAMES


def value_type(value: Any) -> ColumnType | None:
    """The column type a JSON value asks for; None for null (no type) and objects (flattened, not a column)."""
    kind = value.__class__
    if kind is bool:
        return "BOOLEAN"
    if kind is int:
        return "BIGINT" if _BIGINT[0] <= value <= _BIGINT[1] else "DOUBLE"
    if kind is float:
        return "DOUBLE"
    if kind is str:
        return "VARCHAR"
    if kind is list:
        return "JSON"
    return None


def holds(column_type: ColumnType, value: Any) -> bool:
    """Whether a column of `column_type` holds `value` as it is (null always; an integer in a DOUBLE column too)."""
    if value is None:
        return True
    found = value_type(value)
    return found == column_type or (column_type == "DOUBLE" and found == "BIGINT")


def common_type(types: Iterable[ColumnType]) -> ColumnType | None:
    """The type of a new column from its values' types, in the order seen: the first one's, DOUBLE when integers
    and floats both came (values of any other type are the exceptions, quarantined); None when there is none."""
    seen = list(dict.fromkeys(types))
    if not seen:
        return None
    if seen[0] in ("BIGINT", "DOUBLE") and {"BIGINT", "DOUBLE"} <= set(seen):
        return "DOUBLE"
    return seen[0]


def evolved_spec(spec: TableSpec, discovered: Sequence[DiscoveredColumn]) -> TableSpec:
    """`spec` with the discovered columns of its table appended after its declared ones, in the order given."""
    own = tuple(c for c in discovered if c.table == spec.name)
    return spec if not own else _evolved(spec, own)


@cache
def _evolved(spec: TableSpec, discovered: tuple[DiscoveredColumn, ...]) -> TableSpec:
    fields = list(spec.schema) + [column.field for column in discovered]
    return replace(spec, schema=pa.schema(fields, metadata=spec.schema.metadata))


def widens(narrow: TableSpec, wide: TableSpec) -> bool:
    """Whether `wide` is `narrow` with columns appended (a table's schema after a load discovered columns)."""
    names = narrow.schema.names
    return (
        len(wide.schema) > len(names)
        and wide.schema.names[: len(names)] == names
        and all(wide.schema.field(i).equals(f, check_metadata=False) for i, f in enumerate(narrow.schema))
        and replace(wide, schema=narrow.schema) == narrow
    )


@dataclass(frozen=True)
class SchemaPolicy:
    """What a run's client does with the fields the models do not declare: each table's contract (its stream's) and
    the columns already discovered (from the warehouse)."""

    contracts: Mapping[str, SchemaContract] = field(default_factory=dict)  # table -> contract
    discovered: tuple[DiscoveredColumn, ...] = ()
    streams: Mapping[str, str] = field(default_factory=dict)  # table -> the stream that fills it (for messages)

    def contract(self, table: str) -> SchemaContract:
        return self.contracts.get(table, DEFAULT_CONTRACT)

    def stream(self, table: str) -> str:
        return self.streams.get(table, table)

    def columns(self, table: str) -> tuple[DiscoveredColumn, ...]:
        return tuple(c for c in self.discovered if c.table == table)

    def spec(self, table: str) -> TableSpec:
        """The table's schema as the warehouse holds it at the run's start: declared and discovered columns."""
        return evolved_spec(TABLES[table], self.columns(table))
