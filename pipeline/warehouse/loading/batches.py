"""Checking a batch against its TableSpec before it reaches the lake: same column names in the same
order, same Arrow types, no null key. Errors say which table, which column and what to change."""

from __future__ import annotations

import pyarrow as pa

from pipeline.contract.tables import TableSpec
from pipeline.warehouse.errors import SchemaError


def conform_batch(spec: TableSpec, batch: pa.RecordBatch | pa.Table) -> list[pa.RecordBatch]:
    """`batch` as record batches carrying exactly `spec.schema` (its field metadata included); all checked
    before any is returned, so a bad batch writes nothing."""
    if spec.kind != "append" and not spec.key:
        raise SchemaError(f"table {spec.name} is {spec.kind} but has no key; only append tables may go without.")
    if isinstance(batch, pa.Table):
        pieces = batch.to_batches()
    elif isinstance(batch, pa.RecordBatch):
        pieces = [batch]
    else:
        raise SchemaError(f"table {spec.name}: expected a pyarrow RecordBatch or Table, got {type(batch).__name__}.")
    _check_schema(spec, batch.schema)
    for piece in pieces:
        _check_keys(spec, piece)
    return [pa.RecordBatch.from_arrays(p.columns, schema=spec.schema) for p in pieces if p.num_rows]


def _check_schema(spec: TableSpec, schema: pa.Schema) -> None:
    if schema.names != spec.schema.names:
        missing = [n for n in spec.schema.names if n not in schema.names]
        extra = [n for n in schema.names if n not in spec.schema.names]
        detail = f"missing {missing}, unexpected {extra}" if missing or extra else "same columns, other order"
        raise SchemaError(
            f"table {spec.name}: batch columns do not match the spec ({detail}); build batches with the spec's schema."
        )
    for field, wanted in zip(schema, spec.schema, strict=True):
        if not field.type.equals(wanted.type):
            raise SchemaError(
                f"table {spec.name}: column {field.name!r} is {field.type} in the batch but {wanted.type} in the spec."
            )


def _check_keys(spec: TableSpec, batch: pa.RecordBatch) -> None:
    for key in spec.key:
        nulls = batch.column(key).null_count
        if nulls:
            raise SchemaError(
                f"table {spec.name}: {nulls} row(s) of this batch have a null key column {key!r}; "
                "key columns must be non-null (quarantine such records in the client)."
            )
