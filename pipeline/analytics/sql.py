"""Small SQL helpers shared by the analytics modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def relation(schema: str, name: str) -> str:
    return f"{quote(schema)}.{quote(name)}"


def string_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scalar(conn: duckdb.DuckDBPyConnection, query: str, params: Sequence[Any] = ()) -> Any:
    """The first value of a query. Reads the whole result: DuckDB 2 refuses new work on a connection whose
    last result was left unfinished."""
    rows = conn.execute(query, list(params)).fetchall()
    return rows[0][0] if rows else None
