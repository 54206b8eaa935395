"""Validated API dicts -> Arrow columns, per model (records.py derives what the columns are)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from pipeline.source.records import (
    EXTRA_COLUMN,
    JSON_METADATA,
    Leaf,
    dig,
    epoch_us,
    json_text,
    leaves,
    object_paths,
    struct_type,
)


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
            return pa.array([v if v.__class__ is float or v.__class__ is int else None for v in values],
                            type=pa.float64())
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
