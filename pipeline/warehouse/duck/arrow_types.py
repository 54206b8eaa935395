"""Arrow types to DuckDB types, spelled as DuckDB spells them, so nothing is lost on the way in."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from pipeline.warehouse.errors import SchemaError

TIMESTAMPTZ = "TIMESTAMP WITH TIME ZONE"


def q(identifier: str) -> str:
    """A quoted SQL identifier."""
    return '"' + identifier.replace('"', '""') + '"'


def field_type(field: pa.Field, table: str) -> str:
    is_json = (field.metadata or {}).get(b"json") == b"1"
    if is_json:
        if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            raise SchemaError(
                f"table {table}: column {field.name!r} is marked JSON but is {field.type}, "
                "not a string; JSON columns carry JSON text."
            )
        return "JSON"
    return arrow_type(field.type, f"table {table}: column {field.name!r}")


def arrow_type(dtype: pa.DataType, where: str) -> str:
    """The DuckDB type (as DuckDB spells it) that holds `dtype` without loss."""
    t = pa.types
    if t.is_string(dtype) or t.is_large_string(dtype) or t.is_string_view(dtype):
        return "VARCHAR"
    if t.is_boolean(dtype):
        return "BOOLEAN"
    if t.is_integer(dtype):
        names = {8: "TINYINT", 16: "SMALLINT", 32: "INTEGER", 64: "BIGINT"}
        return ("U" if t.is_unsigned_integer(dtype) else "") + names[dtype.bit_width]
    if t.is_floating(dtype):
        return "DOUBLE" if dtype.bit_width == 64 else "FLOAT"
    if t.is_decimal(dtype) and dtype.precision <= 38:
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    if t.is_timestamp(dtype):
        return _timestamp_type(dtype, where)
    if t.is_date(dtype):
        return "DATE"
    if t.is_binary(dtype) or t.is_large_binary(dtype):
        return "BLOB"
    if t.is_list(dtype) or t.is_large_list(dtype):
        return arrow_type(dtype.value_type, where) + "[]"
    if t.is_struct(dtype):
        members = ", ".join(f"{q(f.name)} {arrow_type(f.type, where)}" for f in dtype)
        return f"STRUCT({members})"
    raise SchemaError(
        f"{where} has Arrow type {dtype}, which the warehouse does not map; use a string, "
        "number, boolean, timestamp, date, list or struct type."
    )


def _timestamp_type(dtype: pa.TimestampType, where: str) -> str:
    if dtype.tz is None:
        return "TIMESTAMP_NS" if dtype.unit == "ns" else "TIMESTAMP"
    if dtype.unit == "ns":
        raise SchemaError(
            f"{where} is timestamp[ns, tz={dtype.tz}] but TIMESTAMPTZ keeps microseconds: "
            "cast it to pa.timestamp('us', tz='UTC') in the client."
        )
    return TIMESTAMPTZ


def ts_literal(value: datetime) -> str:
    """A SQL TIMESTAMPTZ literal: the load time every statement of a commit writes."""
    return f"TIMESTAMPTZ '{value.isoformat()}'"
