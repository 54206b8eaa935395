"""TableDef: a warehouse table as DuckDB holds it, and the names every module agrees on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "lms"
REGISTRY = f"{SCHEMA}._tables"  # one row per data table: what its TableSpec said (kind, key, cursor field, parent)
FIRST_LOADED_AT = "first_loaded_at"
LAST_LOADED_AT = "last_loaded_at"
DELETED_AT = "deleted_at"
# The counts of a load's record (lms._load_runs) that say it changed a table's rows
ROW_CHANGES = ("inserted", "updated", "deleted")
META_COLUMNS = (FIRST_LOADED_AT, LAST_LOADED_AT, DELETED_AT)


def changed_tables(written: Mapping[str, Any], kinds: tuple[str, ...] = ROW_CHANGES) -> list[str]:
    """Of a load record's tables (lms._load_runs `tables`: per table, its counts), those whose rows it changed in
    one of the ways `kinds`; a row only seen again is no change."""
    return [name for name, counts in written.items() if counts and any(counts.get(kind, 0) for kind in kinds)]


# The internal tables' descriptions (merge/state.py, schema.py and lake/iceberg.py create them), set as comments like
# the data tables' once they exist.
INTERNAL_COMMENTS: dict[str, tuple[str, dict[str, str]]] = {
    "_sync_state": (
        "Sync state: one row per stream, where its next window starts.",
        {
            "stream": "the stream",
            "cursor": "the next window of the stream starts here (minus the lookback); null: the beginning",
            "last_load_seq": "load_seq of the stream's last committed load (lms._load_runs)",
            "last_loaded_at": "when that load committed",
            "position": "streams read from an ordered log (the certificate inbox): the last sequence loaded",
        },
    ),
    "_load_runs": (
        "One row per committed load, with its per-table counts.",
        {
            "load_seq": "commit order; the lake manifest _loads/<load_seq>-<load_id>.json",
            "load_id": "identity of the load",
            "stream": "the stream loaded",
            "run_id": "the Dagster run (or CLI call) that loaded it",
            "started_at": "when the load started",
            "committed_at": "when it committed: the load time of every row it wrote",
            "cursor_requested": "the window start the load asked for",
            "cursor_before": "the stream's cursor before the load",
            "cursor_after": "the stream's cursor after the load",
            "complete_snapshots": "snapshot tables pulled whole by this load: it saw every row it did not mark "
            "deleted (lms._snapshot_seen)",
            "tables": "per table: fetched, inserted, updated, unchanged, deleted, stale (and a snapshot's content "
            "digest; for a load that repeated the last snapshot, the keys its rows hold)",
            "stats": "what the caller reported (requests, retries...)",
        },
    ),
    "_discovered_columns": (
        "Columns no declaration has: added by a load for a field the platform began sending (docs/schema-evolution.md).",
        {
            "table_name": "the table in schema lms",
            "column_name": "the column, named from the field by the naming rule",
            "api_path": "the field's dotted API path",
            "type": "the column's type, from the values: BOOLEAN, BIGINT, DOUBLE, VARCHAR or JSON",
            "first_seen_load": "load_seq of the load that added it (lms._load_runs)",
            "first_seen_at": "when that load committed",
        },
    ),
    "_tables": (
        "The table registry: what each data table's declaration says.",
        {
            "table_name": "the table in schema lms",
            "kind": "incremental, snapshot or append",
            "cursor_field": "incremental tables: the last-update column",
            "parent": "child tables: the table whose rows own these rows",
            "key": "the table's unique key columns",
        },
    ),
    "_iceberg_mirrored": (
        "What each table's Iceberg mirror was last seen to hold (lake/iceberg.py creates it).",
        {
            "mirror": "the Iceberg location and a digest of its catalog URL",
            "table_name": "the table in schema lms",
            "loaded_through": "the newest warehouse load the Iceberg table equals",
            "row_count": "the Iceberg table's rows then",
            "columns": "the warehouse table's columns then",
        },
    ),
    "_iceberg_mirrored_files": (
        "The data files of the Iceberg snapshot the mirror's record vouches for (lake/iceberg.py creates it).",
        {
            "mirror": "the Iceberg location and a digest of its catalog URL",
            "table_name": "the table in schema lms, or analytics.<mart>",
            "metadata_location": "the Iceberg metadata file whose current snapshot holds these files",
            "data_files": "each data file's location and size in bytes",
        },
    ),
}
# Column names the staging queries add next to the data; a data column may not use them either.
RESERVED_COLUMNS = META_COLUMNS + ("file_row_number",)  # staging also adds _lake_file, _change, _rowid, _old_*


@dataclass(frozen=True)
class TableDef:
    """A table as DuckDB holds it: ordered (name, type) columns including load metadata, and its unique key
    (kept in the registry and enforced by the load's dedupe and the key check, not by a DuckDB index)."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    comment: str = ""
    kind: str = ""  # the TableSpec facts, kept in lms._tables: kind, cursor field, parent table
    cursor_field: str | None = None
    parent: str | None = None
    # The table still carries the PRIMARY KEY that warehouses written before 2026-11-25 declared; the next
    # schema step rebuilds it without (schema.py). Read from the file, never part of a definition's identity.
    declared_primary_key: bool = field(default=False, compare=False)
    # Registered before 2026-11-25, when lms._tables kept no key: the key above comes from the PRIMARY KEY if
    # the table still has one, else it is unknown (empty) until schema.py registers the spec's key.
    key_unregistered: bool = field(default=False, compare=False)
    # (column, description) from the contract, set as COMMENT ON COLUMN; not read back into a definition
    # from the file, so never part of its identity.
    column_comments: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def has_deleted_at(self) -> bool:
        return DELETED_AT in self.column_names
