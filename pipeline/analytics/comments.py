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
# Every column of the file -> its description, as JSON in the file's key-value metadata: what readers that show
# no Arrow field metadata (polars, DuckDB's parquet_kv_metadata) find.
PARQUET_COLUMNS_KEY = b"lessonsync.column_descriptions"
# pandas restores `df.attrs` from this key's "attributes" when pyarrow reads the file.
PANDAS_METADATA_KEY = b"pandas"


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
    """`schema` with the model's descriptions as Arrow metadata, kept in the Parquet file: each field's in the
    field's, and the model's and every column's in the file's key-value metadata (`described_file_metadata`)."""
    fields = [
        field.with_metadata({**(field.metadata or {}), PARQUET_DESCRIPTION_KEY: model.columns[field.name].encode()})
        if model.columns.get(field.name)
        else field
        for field in schema
    ]
    return pa.schema(fields, metadata={**(schema.metadata or {}), **described_file_metadata(schema.names, model)})


def described_file_metadata(columns: list[str], model: Model) -> dict[bytes, bytes]:
    """The file-level key-value metadata describing a file of `model` with `columns`: the model's description, its
    columns' descriptions as one JSON map, the model with them, and the same as pandas' `df.attrs`."""
    described = {name: model.columns.get(name, "") for name in columns}
    about = {"name": model.name, "description": model.description, "columns": model.columns}
    # pandas metadata naming no column and no index: pyarrow then converts every column as it does without it
    pandas = {
        "index_columns": [],
        "column_indexes": [],
        "columns": [],
        "attributes": {"description": model.description, "column_descriptions": described},
    }
    return {
        PARQUET_DESCRIPTION_KEY: model.description.encode(),
        PARQUET_COLUMNS_KEY: json.dumps(described, ensure_ascii=False).encode(),
        PARQUET_MODEL_KEY: json.dumps(about).encode(),
        PANDAS_METADATA_KEY: json.dumps(pandas, ensure_ascii=False).encode(),
    }
