"""Iceberg schemas and data-file entries made from what DuckDB writes, without pyiceberg's Arrow IO.

pyiceberg converts an Arrow schema and reads a Parquet footer into a `DataFile` in `pyiceberg.io.pyarrow`, whose
import brings `pyarrow.dataset` along: ~50 MiB of RSS, for the rest of the sync's process. The mirror's columns are
primitives and lists of them, written by DuckDB; for those this module makes the same schema and the same
`DataFile` (counts, sizes, split offsets and bounds, truncated as pyiceberg truncates them, under the default
metrics mode), and the tables use fsspec through iceberg_io.py. Anything else (a struct or map column, a table with
metrics properties or a partition spec, a Parquet type other than the one expected) is handed to pyiceberg's
own functions, which then import their module.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.types import IcebergType, PrimitiveType

# Every table's FileIO: fsspec's (local disk, and S3 through s3fs, which the lake uses too), not pyarrow's.
FILE_IO = {"py-io-impl": "pipeline.warehouse.lake.iceberg_io.LakeFileIO"}
ARROW_DOC = b"doc"  # the Arrow field metadata pyiceberg makes a field's `doc`
TRUNCATE_AT = 16  # the default metrics mode, truncate(16), for strings and binaries; other types in full
_UTC = {"UTC", "+00:00", "Etc/UTC", "Z"}  # the time zones pyiceberg takes for a timestamptz
_METRICS_PREFIX = "write.metadata.metrics."


def iceberg_schema(schema: pa.Schema) -> Schema | pa.Schema:
    """The Iceberg schema pyiceberg would make of `schema` (field ids in order; a table assigns its own), or
    `schema` itself when a field is not a primitive or a list of one (pyiceberg converts it then)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import ListType, NestedField

    ids = itertools.count(1)
    top = [next(ids) for _ in schema]
    fields = []
    for field_id, field in zip(top, schema, strict=True):
        kind: IcebergType | None
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            element = _primitive(field.type.value_type)
            value = field.type.value_field
            kind = None if element is None else ListType(next(ids), element, element_required=not value.nullable)
        else:
            kind = _primitive(field.type)
        if kind is None:
            return schema
        doc = (field.metadata or {}).get(ARROW_DOC)
        fields.append(
            NestedField(field_id, field.name, kind, required=not field.nullable, doc=doc.decode() if doc else None)
        )
    return Schema(*fields)


def _primitive(kind: pa.DataType) -> PrimitiveType | None:
    """pyiceberg's Iceberg type for an Arrow primitive (io/pyarrow.py, _ConvertToIceberg.primitive); None for
    any other type."""
    from pyiceberg import types as t

    if pa.types.is_boolean(kind):
        return t.BooleanType()
    if pa.types.is_integer(kind):
        return t.IntegerType() if kind.bit_width <= 32 else t.LongType()
    if pa.types.is_float32(kind):
        return t.FloatType()
    if pa.types.is_float64(kind):
        return t.DoubleType()
    if isinstance(kind, pa.Decimal128Type):
        return t.DecimalType(kind.precision, kind.scale)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return t.StringType()
    if pa.types.is_date32(kind):
        return t.DateType()
    if pa.types.is_timestamp(kind) and kind.unit in ("s", "ms", "us"):
        return t.TimestamptzType() if kind.tz in _UTC else t.TimestampType() if kind.tz is None else None
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return t.BinaryType()
    return None


def data_file(io: FileIO, metadata: TableMetadata, path: str) -> DataFile:
    """The `DataFile` of the Parquet file at `path` for a table of `metadata`: pyiceberg's
    `parquet_file_to_data_file`, made here for the files DuckDB writes (module docstring)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    source = io.new_input(path)
    with source.open() as stream:
        footer = pq.read_metadata(stream)
    statistics = _statistics(footer, metadata)
    if statistics is None:
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        return parquet_file_to_data_file(io, metadata, path)
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        file_size_in_bytes=len(source),
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics,
    )


def _statistics(footer: pq.FileMetaData, metadata: TableMetadata) -> dict[str, Any] | None:
    """The `DataFile` fields a footer gives, as pyiceberg computes them (io/pyarrow.py,
    data_file_statistics_from_parquet_metadata); None where this module does not stand in for it."""
    if metadata.spec().fields or any(key.startswith(_METRICS_PREFIX) for key in metadata.properties):
        return None
    columns = _columns(metadata.schema())
    if columns is None:
        return None
    column_sizes: dict[int, int] = {}
    value_counts: dict[int, int] = {}
    null_counts: dict[int, int] = {}
    bounds: dict[int, _Bounds] = {}
    split_offsets = []
    for group in (footer.row_group(r) for r in range(footer.num_row_groups)):
        first = group.column(0)
        dictionary, data = first.dictionary_page_offset, first.data_page_offset
        split_offsets.append(dictionary if first.has_dictionary_page and dictionary < data else data)
        for chunk in (group.column(c) for c in range(footer.num_columns)):
            column = columns.get(chunk.path_in_schema.split(".")[0])
            if column is None:
                return None
            field_id, kind, nested = column
            column_sizes[field_id] = column_sizes.get(field_id, 0) + chunk.total_compressed_size
            value_counts[field_id] = value_counts.get(field_id, 0) + chunk.num_values
            stats = chunk.statistics if chunk.is_stats_set else None
            if stats is None:  # pyiceberg drops the column's null count and bounds
                bounds[field_id] = _Bounds(kind, invalid=True)
                continue
            if stats.has_null_count:
                null_counts[field_id] = null_counts.get(field_id, 0) + stats.null_count
            if nested:  # counts only, as pyiceberg keeps them for a nested column
                continue
            if _physical(kind) not in _accepted(stats.physical_type):
                return None
            bounds.setdefault(field_id, _Bounds(kind)).update(stats.min, stats.max)
    for field_id in [f for f, b in bounds.items() if b.invalid]:
        null_counts.pop(field_id, None)
    return {
        "record_count": footer.num_rows,
        "column_sizes": column_sizes,
        "value_counts": value_counts,
        "null_value_counts": null_counts,
        "nan_value_counts": {},
        "lower_bounds": {f: v for f, b in bounds.items() if (v := b.lower()) is not None},
        "upper_bounds": {f: v for f, b in bounds.items() if (v := b.upper()) is not None},
        "split_offsets": sorted(split_offsets),
    }


def _columns(schema: Schema) -> dict[str, tuple[int, PrimitiveType, bool]] | None:
    """Top-level column -> the field id its Parquet leaf maps to, its primitive type and whether it is a list's
    element; None when a column is neither (a struct or a map)."""
    from pyiceberg.types import ListType, PrimitiveType

    columns: dict[str, tuple[int, PrimitiveType, bool]] = {}
    for field in schema.fields:
        kind = field.field_type
        if isinstance(kind, ListType) and isinstance(kind.element_type, PrimitiveType):
            columns[field.name] = (kind.element_id, kind.element_type, True)
        elif isinstance(kind, PrimitiveType):
            columns[field.name] = (field.field_id, kind, False)
        else:
            return None
    return columns


def _physical(kind: PrimitiveType) -> str:
    """The Parquet physical type pyiceberg expects of an Iceberg type (io/pyarrow.py, _primitive_to_physical)."""
    from pyiceberg import types as t

    if isinstance(kind, t.BooleanType):
        return "BOOLEAN"
    if isinstance(kind, (t.IntegerType, t.DateType)):
        return "INT32"
    if isinstance(kind, (t.LongType, t.TimestampType, t.TimestamptzType)):
        return "INT64"
    if isinstance(kind, t.FloatType):
        return "FLOAT"
    if isinstance(kind, t.DoubleType):
        return "DOUBLE"
    if isinstance(kind, (t.StringType, t.BinaryType)):
        return "BYTE_ARRAY"
    return "?"  # decimals and the rest: pyiceberg's own function


def _accepted(physical: str) -> Iterator[str]:
    """The Iceberg physical types a Parquet physical type stands for (INT32 widens to INT64, FLOAT to DOUBLE)."""
    yield physical
    if physical == "INT32":
        yield "INT64"
    if physical == "FLOAT":
        yield "DOUBLE"


class _Bounds:
    """A column's lowest and highest value over the row groups, serialized as pyiceberg's StatsAggregator does."""

    def __init__(self, kind: PrimitiveType, *, invalid: bool = False) -> None:
        self.kind, self.invalid = kind, invalid
        self.low: Any = None
        self.high: Any = None

    def update(self, low: Any, high: Any) -> None:
        if low is not None:
            self.low = low if self.low is None else min(low, self.low)
        if high is not None:
            self.high = high if self.high is None else max(high, self.high)

    def lower(self) -> bytes | None:
        from pyiceberg.conversions import to_bytes

        if self.invalid or self.low is None:
            return None
        return to_bytes(self.kind, self.low[:TRUNCATE_AT] if self._truncated else self.low)

    def upper(self) -> bytes | None:
        from pyiceberg.conversions import to_bytes
        from pyiceberg.types import StringType
        from pyiceberg.utils.truncate import truncate_upper_bound_binary_string, truncate_upper_bound_text_string

        if self.invalid or self.high is None:
            return None
        if not self._truncated:
            return to_bytes(self.kind, self.high)
        if isinstance(self.kind, StringType):
            text = truncate_upper_bound_text_string(self.high, TRUNCATE_AT)
            return None if text is None else to_bytes(self.kind, text)
        raw = truncate_upper_bound_binary_string(self.high, TRUNCATE_AT)
        return None if raw is None else to_bytes(self.kind, raw)

    @property
    def _truncated(self) -> bool:
        from pyiceberg.types import BinaryType, StringType

        return isinstance(self.kind, (StringType, BinaryType))
