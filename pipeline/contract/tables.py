"""Every warehouse table (schema `lms`) declared as data: a TableSpec each, and how a page's records become
its batch. The contract between the source client (which yields Arrow record batches for a table) and the
warehouse (which creates, upserts and snapshots it). Import `TABLES` (name -> TableSpec) from here.

A table a stream fills is declared with its stream (declarations.py: `record_table`, `child_table`), which
registers it in `TABLES` and `BUILDS`; the tables no stream fills (the quarantine, the certificates) are here.

Column names follow the models: the API field in snake_case without leading underscores, nested objects
flattened with the parent name as prefix (columns.py). Load metadata columns (first/last loaded, deleted)
are the warehouse's business and are not part of `schema`.

Child tables (answer_results, lesson_session_registrations, lesson_questions; group_members for the
users of a group) are built from the parent batch of the same page and follow it in the stream: the
warehouse replaces all children of each parent key it receives (a parent whose list became empty has
no child rows but must lose its old ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from pipeline.contract import models as m
from pipeline.contract.columns import JSON_METADATA, TIMESTAMP, ModelColumns

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


ChildRow = tuple[int, tuple[Any, ...], Any]  # (index of the parent in its page, context values, child dict)


def table_spec(
    name: str,
    fields: list[pa.Field],
    key: tuple[str, ...],
    kind: TableKind,
    description: str,
    *,
    cursor: str | None = None,
    parent: str | None = None,
    order_by: tuple[str, ...] = (),
) -> TableSpec:
    fields = [f.with_nullable(False) if f.name in key else f for f in fields]
    return TableSpec(
        name=name,
        schema=pa.schema(fields),
        key=key,
        kind=kind,
        cursor_field=cursor,
        parent=parent,
        description=description,
        order_by=order_by,
    )


@dataclass(frozen=True)
class RecordTable:
    """A table whose rows are the records of a page."""

    spec: TableSpec
    columns: ModelColumns

    def batch(self, records: Sequence[Any], *, with_extras: bool) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            self.columns.arrays(records, with_extras=with_extras), schema=self.spec.schema
        )


@dataclass(frozen=True)
class ChildTable:
    """Rows derived from a parent page: parent key columns, context values, then child record columns."""

    spec: TableSpec
    parent_key: tuple[tuple[str, str], ...]  # (parent column, column here)
    context: tuple[pa.Field, ...]
    columns: ModelColumns | None
    context_first: bool = False

    def batch(self, parent: pa.RecordBatch, rows: Sequence[ChildRow], *, with_extras: bool) -> pa.RecordBatch:
        indices = pa.array([row[0] for row in rows], type=pa.int64())
        keys = [parent.column(source).take(indices) for source, _ in self.parent_key]
        context = [pa.array([row[1][i] for row in rows], type=f.type) for i, f in enumerate(self.context)]
        front = [*context, *keys] if self.context_first else [*keys, *context]
        records = self.columns.arrays([row[2] for row in rows], with_extras=with_extras) if self.columns else []
        return pa.RecordBatch.from_arrays([*front, *records], schema=self.spec.schema)


def child_table(
    name: str,
    parent: RecordTable,
    parent_key: tuple[tuple[str, str], ...],
    context: list[pa.Field],
    columns: ModelColumns | None,
    key: tuple[str, ...],
    description: str,
    *,
    context_first: bool = False,
    linked: bool = True,
) -> ChildTable:
    key_fields = [parent.spec.schema.field(source).with_name(target) for source, target in parent_key]
    front = [*context, *key_fields] if context_first else [*key_fields, *context]
    spec = table_spec(
        name,
        [*front, *(columns.fields if columns else [])],
        key,
        parent.spec.kind,
        description,
        parent=parent.spec.name if linked else None,
    )
    return ChildTable(spec, parent_key, tuple(context), columns, context_first)


def record_table(
    name: str,
    model: type[m.ApiModel],
    key: tuple[str, ...],
    kind: TableKind,
    description: str,
    *,
    exclude: frozenset[str] = frozenset(),
    cursor: str | None = None,
) -> RecordTable:
    columns = ModelColumns(model, exclude=exclude)
    return RecordTable(table_spec(name, columns.fields, key, kind, description, cursor=cursor), columns)


QUARANTINE = table_spec(
    "quarantine",
    [
        pa.field("seen_at", TIMESTAMP),
        pa.field("stream", pa.string()),
        pa.field("endpoint", pa.string()),
        pa.field("params", pa.string(), metadata=JSON_METADATA),
        pa.field("page", pa.int64()),
        pa.field("record_index", pa.int64()),
        pa.field("field", pa.string()),
        pa.field("message", pa.string()),
        pa.field("raw", pa.string(), metadata=JSON_METADATA),
    ],
    ("seen_at", "endpoint", "params", "page", "record_index"),
    "append",
    "Records that broke their schema, kept raw with where and why.",
)


# Certificates arrive by webhook (pipeline/webhooks), not from a stream: the receiver stores each delivery in the
# inbox, and the certificates asset loads the inbox through Warehouse.load() like any stream (the inbox sequence
# is its position). Payload columns come from the Certificate model like every record table's.
CERTIFICATE_COLUMNS = ModelColumns(m.Certificate)
DELIVERY_FIELDS = [
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("event_type", pa.string(), nullable=False),
    pa.field("received_at", TIMESTAMP, nullable=False),
    pa.field("source", pa.string()),
    pa.field("inbox_id", pa.string(), nullable=False),
    pa.field("sequence", pa.int64(), nullable=False),
]
CURRENT_STATE_FIELDS = [
    pa.field("state", pa.string(), nullable=False),  # "completed" or "expired": sorts expired last (order_by)
    pa.field("last_event_id", pa.string(), nullable=False),
    pa.field("last_event_type", pa.string(), nullable=False),
    pa.field("last_received_at", TIMESTAMP, nullable=False),
]
_PAYLOAD_FIELDS = [f.with_nullable(False) if f.name == "id" else f for f in CERTIFICATE_COLUMNS.fields]  # _id required
CERTIFICATE_EVENTS = table_spec(
    "certificate_events",
    [*DELIVERY_FIELDS, *_PAYLOAD_FIELDS],
    ("event_id",),
    "append",
    "Every distinct certificate webhook delivery (completed or expired), in inbox order.",
)
CERTIFICATES = table_spec(
    "certificates",
    [*CERTIFICATE_COLUMNS.fields, *CURRENT_STATE_FIELDS],
    ("id",),
    "incremental",
    "Current state of each certificate: the latest updatedAt wins; expired beats completed on ties.",
    cursor="updated_at",
    order_by=("updated_at", "state", "last_received_at"),
)


def quarantine_batch(rows: Sequence[Any]) -> pa.RecordBatch:
    """QuarantineRow objects -> one batch of the quarantine table."""
    return pa.RecordBatch.from_pylist([vars(row) for row in rows], schema=QUARANTINE.schema)


# The registries: the tables of every declared stream (streams.py fills these when a stream is registered, in
# declaration order; the package imports declarations.py first, so they are whole whichever module is imported),
# then the tables no stream fills: the quarantine, and the certificates the webhook inbox fills.
TABLES_WITHOUT_STREAM = (QUARANTINE, CERTIFICATE_EVENTS, CERTIFICATES)

# Sync state kept as a table of schema lms, so that it commits and is rebuilt with the loads it describes: not
# platform data, so the lake's Iceberg tables, which analysts read, leave it out.
ANSWER_VERSIONS_TABLE = "answers_synced_versions"
SYNC_STATE_TABLES = frozenset({ANSWER_VERSIONS_TABLE})
BUILDS: dict[str, RecordTable | ChildTable] = {}  # how a page's records become each stream table's batch
TABLES: dict[str, TableSpec] = {spec.name: spec for spec in TABLES_WITHOUT_STREAM}
