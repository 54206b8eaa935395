"""What a warehouse table is, declared as data: the contract between the source client (which yields
Arrow record batches for a table) and the warehouse (which creates, upserts and snapshots it).

Column names follow the models: the API field in snake_case without leading underscores, nested objects
flattened with the parent name as prefix. Load metadata columns (first/last loaded, deleted) are the
warehouse's business and are not part of `schema`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

TableKind = Literal["incremental", "snapshot", "append"]


@dataclass(frozen=True)
class TableSpec:
    name: str  # table name in DuckDB schema `lms`, e.g. "answers"
    schema: pa.Schema  # data columns, in order; JSON text columns carry field metadata {b"json": b"1"}
    key: tuple[str, ...]  # primary key columns, all non-null
    kind: TableKind  # incremental: upserted by cursor window; snapshot: pulled whole, vanished rows marked
    cursor_field: str | None = None  # incremental tables: the last-update column (e.g. "last_date")
    parent: str | None = None  # child tables (answer_results...): the table whose rows own these rows
    description: str = ""  # one line for the analysts' docs
    # Which version of a key wins, when it is not just the greatest cursor field: columns compared in order,
    # greatest first, NULL lowest (within a load and against the warehouse's copy; a row ordered before the
    # stored one is stale). Empty: the cursor field alone (certificates: updatedAt, then expired over completed).
    order_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        missing = [k for k in self.key if k not in self.schema.names]
        if missing:
            raise ValueError(f"table {self.name}: key columns {missing} are not in its schema")
        if self.cursor_field is not None and self.cursor_field not in self.schema.names:
            raise ValueError(f"table {self.name}: cursor field {self.cursor_field!r} is not in its schema")
        unordered = [c for c in self.order_by if c not in self.schema.names]
        if unordered:
            raise ValueError(f"table {self.name}: order_by columns {unordered} are not in its schema")
