"""TableDef: a warehouse table as DuckDB holds it, and the names every module agrees on."""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA = "lms"
REGISTRY = f"{SCHEMA}._tables"  # one row per data table: what its TableSpec said (kind, key, cursor field, parent)
FIRST_LOADED_AT = "first_loaded_at"
LAST_LOADED_AT = "last_loaded_at"
DELETED_AT = "deleted_at"
META_COLUMNS = (FIRST_LOADED_AT, LAST_LOADED_AT, DELETED_AT)
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

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def has_deleted_at(self) -> bool:
        return DELETED_AT in self.column_names
