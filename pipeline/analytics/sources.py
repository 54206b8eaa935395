"""`sources.yml`: the synced warehouse tables models may read, in dbt's sources schema with its one source:

version: 2
sources:
  - name: lms                      # the DuckDB schema the sync writes; read as {{ source('lms', '<table>') }}
    description: ...
    tables:
      - name: answers
        description: One answer to one question.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.analytics.config import read_yaml
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import RAW_SCHEMA

_SHAPE = f"`sources: [{{name: {RAW_SCHEMA}, tables: [{{name: <table>, description: ...}}]}}]`"


def load_sources(path: Path) -> dict[str, str]:
    """Each table of the source `lms` -> its description."""
    if not path.exists():
        raise ModelError(f"{path}: missing; it declares the {RAW_SCHEMA}.* tables models may read")
    raw = read_yaml(path)
    entries = raw.get("sources") if isinstance(raw, dict) else None
    if not (
        isinstance(entries, list)
        and len(entries) == 1
        and isinstance(entries[0], dict)
        and entries[0].get("name") == RAW_SCHEMA
        and set(raw) <= {"version", "sources"}
    ):
        raise ModelError(f"{path}: expected dbt's schema with one source, the synced warehouse: {_SHAPE}")
    source = entries[0]
    tables = source.get("tables")
    if set(source) - {"name", "description", "tables"} or not isinstance(tables, list) or not tables:
        raise ModelError(f"{path}: sources[0]: expected name, description and a non-empty `tables:` list")
    found: dict[str, str] = {}
    for index, table in enumerate(tables):
        name = _table_name(table, f"{path}: sources[0].tables[{index}]")
        if name in found:
            raise ModelError(f"{path}: sources[0].tables[{index}]: table {name!r} is declared twice")
        found[name] = str(table.get("description") or "").strip()
    return found


def _table_name(table: Any, where: str) -> str:
    if not (isinstance(table, dict) and isinstance(table.get("name"), str) and set(table) <= {"name", "description"}):
        raise ModelError(f"{where}: expected a mapping of name and description")
    return str(table["name"])
