"""A model's YAML descriptions where analysts read them: `COMMENT ON` its relation and columns (in the warehouse
and in the published snapshot), and the key-value and field metadata of its Parquet file."""

from __future__ import annotations

import json
from collections.abc import Iterable

import duckdb
import pyarrow as pa

from pipeline.analytics.models import Model
from pipeline.analytics.sql import quote, string_literal

PARQUET_DESCRIPTION_KEY = b"description"  # a field's and the file's description, as Arrow metadata
PARQUET_MODEL_KEY = b"lessonsync.model"  # the file's model, with its YAML's column descriptions, as JSON


def comment_statements(relation: str, kind: str, description: str, columns: dict[str, str]) -> list[str]:
    """COMMENT ON the relation (`kind` TABLE or VIEW) and on each described column of `columns`."""
    statements = [f"COMMENT ON {kind} {relation} IS {string_literal(description)}"] if description else []
    return statements + [
        f"COMMENT ON COLUMN {relation}.{quote(name)} IS {string_literal(text)}"
        for name, text in columns.items()
        if text
    ]


def model_comment_statements(relation: str, kind: str, model: Model, have: Iterable[str]) -> list[str]:
    """The model's YAML descriptions on `relation`, for the columns it has."""
    present = set(have)
    return comment_statements(
        relation, kind, model.description, {n: t for n, t in model.columns.items() if n in present}
    )


def execute_together(conn: duckdb.DuckDBPyConnection, statements: list[str]) -> None:
    """The statements in one transaction (the caller's, if one is open): a catalog change committed on its own
    costs a commit each, ~20x the whole batch."""
    try:
        conn.execute("BEGIN TRANSACTION")
    except duckdb.TransactionException:  # the caller's transaction is open: the statements join it
        own = False
    else:
        own = True
    try:
        for statement in statements:
            conn.execute(statement)
    except BaseException:
        if own:
            conn.execute("ROLLBACK")
        raise
    if own:
        conn.execute("COMMIT")


def described_schema(schema: pa.Schema, model: Model) -> pa.Schema:
    """`schema` with each field's description and the model's, as Arrow metadata (kept in the Parquet file)."""
    fields = [
        field.with_metadata({**(field.metadata or {}), PARQUET_DESCRIPTION_KEY: model.columns[field.name].encode()})
        if model.columns.get(field.name)
        else field
        for field in schema
    ]
    about = {"name": model.name, "description": model.description, "columns": model.columns}
    return pa.schema(
        fields,
        metadata={
            **(schema.metadata or {}),
            PARQUET_DESCRIPTION_KEY: model.description.encode(),
            PARQUET_MODEL_KEY: json.dumps(about).encode(),
        },
    )
