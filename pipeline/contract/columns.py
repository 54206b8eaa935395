"""Model -> Arrow columns, derived from the pydantic models so the warehouse contract follows the spec and never
drifts from it.

Types: str and enumerations -> string; Number -> float64; bool -> bool; date-time -> timestamp[us, UTC] (without
an offset: UTC); a nested object -> its fields flattened under the parent's name; a list of strings ->
list<string>; anything else, lists of objects too -> JSON text. A number-or-string union (AnswerResult.value)
becomes `<name>_number` and `<name>_text`, at most one set, so numeric answers stay numeric. Unknown fields go to
one JSON column `extra`, keyed by their dotted API path (docs/design.md, "Columns from the models").

`leaves` says what the columns are (the table declarations read it); `ModelColumns` builds them from validated
dicts (pipeline/source/decoding.py); the fast decoder (pipeline/source/fast_decoding.py) builds the same arrays
another way and is tested against this one.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

JSON_METADATA = {b"json": b"1"}
EXTRA_COLUMN = "extra"
TIMESTAMP = pa.timestamp("us", tz="UTC")
LeafKind = Literal["arrow", "timestamp", "json", "number", "text"]


@dataclass(frozen=True)
class Leaf:
    """One output column and where its value sits in an API record (a path of API names)."""

    column: str
    path: tuple[str, ...]
    type: pa.DataType
    kind: LeafKind
    default: Any = None  # the model's default, for records that omit the field

    @property
    def field(self) -> pa.Field:
        json = self.kind == "json"
        return pa.field(self.column, self.type, metadata=JSON_METADATA if json else None)


def strip_optional(annotation: Any) -> tuple[Any, ...]:
    """The non-None members of an annotation (Annotated unwrapped)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return tuple(m for member in members for m in strip_optional(member))
    return (annotation,)


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _scalar_type(members: tuple[Any, ...]) -> pa.DataType | None:
    kinds = set(members)
    if all(typing.get_origin(m) is Literal for m in kinds):
        values = [v for m in kinds for v in typing.get_args(m)]
        return pa.string() if all(isinstance(v, str) for v in values) else None
    if kinds == {str}:
        return pa.string()
    if kinds == {bool}:
        return pa.bool_()
    if kinds <= {float, int} and float in kinds:
        return pa.float64()
    if kinds == {int}:
        return pa.int64()
    if kinds == {datetime}:
        return TIMESTAMP
    return None


def _is_string_list(members: tuple[Any, ...]) -> bool:
    return (
        len(members) == 1
        and typing.get_origin(members[0]) is list
        and _scalar_type(strip_optional(typing.get_args(members[0])[0])) == pa.string()
    )


def leaves(
    model: type[BaseModel], *, exclude: frozenset[str] = frozenset(), prefix: str = "", path: tuple[str, ...] = ()
) -> list[Leaf]:
    """Flattened columns of `model` (without `extra`), in field order; `exclude` names top-level fields
    carried elsewhere (child tables)."""
    found: list[Leaf] = []
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        column, where = f"{prefix}{name}", (*path, info.alias or name)
        members = strip_optional(info.annotation)
        default = None if info.default is PydanticUndefined else info.default
        if len(members) == 1 and is_model(members[0]):
            found += leaves(members[0], prefix=f"{column}_", path=where)
        elif (scalar := _scalar_type(members)) is not None:
            found.append(Leaf(column, where, scalar, "timestamp" if scalar == TIMESTAMP else "arrow", default))
        elif set(members) == {float, int, str}:
            found += [
                Leaf(f"{column}_number", where, pa.float64(), "number"),
                Leaf(f"{column}_text", where, pa.string(), "text"),
            ]
        elif _is_string_list(members):
            found.append(Leaf(column, where, pa.list_(pa.string()), "arrow", default))
        else:
            found.append(Leaf(column, where, pa.string(), "json"))
    return found


def object_paths(
    model: type[BaseModel], *, exclude: frozenset[str] = frozenset(), path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], frozenset[str]]]:
    """(API path, known API names) of the record and of each flattened nested object: where extras hide."""
    known = frozenset(info.alias or name for name, info in model.model_fields.items())
    found = [(path, known)]
    for name, info in model.model_fields.items():
        members = strip_optional(info.annotation)
        if name not in exclude and len(members) == 1 and is_model(members[0]):
            found += object_paths(members[0], path=(*path, info.alias or name))
    return found


def dig(record: Any, path: tuple[str, ...]) -> Any:
    """The value at `path` in nested dicts, None when any step is absent or null."""
    for key in path:
        if record is None:
            return None
        record = record.get(key)
    return record


def struct_type(arrow_leaves: Sequence[Leaf]) -> pa.StructType:
    """The nested struct (API names) holding every "arrow" leaf, for one C++ conversion of the dicts."""
    tree: dict[str, Any] = {}
    for leaf in arrow_leaves:
        node = tree
        for key in leaf.path[:-1]:
            node = node.setdefault(key, {})
        node[leaf.path[-1]] = leaf.type

    def build(node: dict[str, Any]) -> pa.StructType:
        return pa.struct([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)


# Date-times the warehouse holds: instants from 0001-01-01 to 9999-12-31 in UTC (Python's datetime range, which
# every reader of a timestamp column converts to). A valid ISO 8601 value of year 1 or 9999 with an offset can
# fall outside it once converted to UTC: the source quarantines such a record, the webhook receiver refuses it.
OVERFLOW_MESSAGE = "date-time out of range once converted to UTC (0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z)"


def utc_overflows(value: Any) -> bool:
    """True when an aware date-time has no UTC equivalent within 0001-01-01..9999-12-31."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.year not in (1, 9999):
        return False
    try:
        value.astimezone(UTC)
    except OverflowError:
        return True
    return False


def epoch_us(value: datetime | None) -> int | None:
    """Microseconds since the epoch; a date-time without offset is taken as UTC."""
    if value is None:
        return None
    return (value - (_EPOCH if value.tzinfo is not None else _EPOCH_NAIVE)) // _MICROSECOND


def json_text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _flat_columns(records: Sequence[Any], struct: pa.StructType) -> dict[str, pa.Array]:
    """Every leaf of `struct` from the dicts, by dotted API path (parent nulls propagate to children)."""
    table = pa.Table.from_struct_array(pa.array(records, type=struct))
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    return {name: column.combine_chunks() for name, column in zip(table.column_names, table.columns, strict=True)}


class ModelColumns:
    """The columns of one model's records (flattened fields, then `extra`)."""

    def __init__(self, model: type[BaseModel], *, exclude: frozenset[str] = frozenset(), prefix: str = "") -> None:
        self.leaves = tuple(leaves(model, exclude=exclude, prefix=prefix))
        self._arrow = [leaf for leaf in self.leaves if leaf.kind == "arrow"]
        self._struct = struct_type(self._arrow) if self._arrow else None
        self._objects = object_paths(model, exclude=exclude)

    @property
    def fields(self) -> list[pa.Field]:
        return [leaf.field for leaf in self.leaves] + [pa.field(EXTRA_COLUMN, pa.string(), metadata=JSON_METADATA)]

    def arrays(self, records: Sequence[Any], *, with_extras: bool) -> list[pa.Array]:
        """One array per field; `with_extras` False when the records are known to have no unknown field."""
        flat = _flat_columns(records, self._struct) if self._struct is not None else {}
        arrays = [self._leaf_array(leaf, records, flat) for leaf in self.leaves]
        if with_extras:
            arrays.append(pa.array([self.extras(r) for r in records], type=pa.string()))
        else:
            arrays.append(pa.nulls(len(records), type=pa.string()))
        return arrays

    @staticmethod
    def _leaf_array(leaf: Leaf, records: Sequence[Any], flat: dict[str, pa.Array]) -> pa.Array:
        if leaf.kind == "arrow":
            array = flat[".".join(leaf.path)]
            # validation rejects an explicit null for a field with a default, so null here means "absent"
            return pc.fill_null(array, leaf.default) if leaf.default is not None else array
        if len(leaf.path) == 1:
            key = leaf.path[0]
            values = [r.get(key) for r in records]
        else:
            values = [dig(r, leaf.path) for r in records]
        if leaf.kind == "timestamp":
            return pa.array([epoch_us(v) for v in values], type=pa.int64()).view(leaf.type)
        if leaf.kind == "json":
            return pa.array([json_text(v) for v in values], type=pa.string())
        if leaf.kind == "number":  # exact classes: bool is an int subclass but not a number here
            return pa.array(
                [v if v.__class__ is float or v.__class__ is int else None for v in values], type=pa.float64()
            )
        return pa.array([v if v.__class__ is str else None for v in values], type=pa.string())

    def extras(self, record: Any) -> str | None:
        """The record's unknown fields as JSON text keyed by dotted API path, None when it has none."""
        found: dict[str, Any] | None = None
        for path, known in self._objects:
            obj = dig(record, path) if path else record
            if obj is None:
                continue
            unknown = obj.keys() - known
            if unknown:
                prefix = "".join(f"{p}." for p in path)
                found = found if found is not None else {}
                found.update({f"{prefix}{key}": obj[key] for key in sorted(unknown)})
        return None if found is None else orjson.dumps(found).decode()
