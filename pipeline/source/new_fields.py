"""Schema drift the platform introduces: fields our models do not declare. They are kept in each row's `extra`
(JSON keyed by API path, records.py); here they are counted per table and path, so a run can report them."""

from __future__ import annotations

import orjson
import pyarrow as pa

from pipeline.source.records import EXTRA_COLUMN


def count_new_fields(table: str, records: pa.RecordBatch, counts: dict[str, int]) -> None:
    """Add to `counts` ("table.api.path" -> records carrying it) the new fields of `records`.

    Free for the usual page: a batch whose `extra` column is all null is skipped on Arrow's null count."""
    index = records.schema.get_field_index(EXTRA_COLUMN)
    if index < 0:
        return
    column = records.column(index)
    if column.null_count == len(column):
        return
    for text in column.to_pylist():
        if text:
            for path in orjson.loads(text):
                name = f"{table}.{path}"
                counts[name] = counts.get(name, 0) + 1


def paths_of(table: str, counts: dict[str, int]) -> list[str]:
    """The new field paths seen in `table`, sorted."""
    prefix = f"{table}."
    return sorted(name[len(prefix):] for name in counts if name.startswith(prefix))
