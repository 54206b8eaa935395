"""Which tables a model's SQL reads, found with a real SQL parser (sqlglot, DuckDB dialect).

Dependencies are never hand-kept: a model's compiled SQL (refs.py: `{{ ref('x') }}` -> `analytics.x`,
`{{ source('lms', 'x') }}` -> `lms.x`) reads `lms.<raw table>` (the synced warehouse tables) and
`analytics.<model>` (other models), always schema-qualified, so the SQL runs as compiled in the warehouse.
CTE names are not tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from pipeline.analytics.errors import ModelError

RAW_SCHEMA = "lms"
MODEL_SCHEMA = "analytics"
# Table functions that read no table (and so hide no dependency); file readers like read_parquet are refused.
_ALLOWED_TABLE_FUNCTIONS = (exp.GenerateSeries, exp.Unnest)


@dataclass(frozen=True, order=True)
class TableRef:
    """A table a model reads: `schema.name`, schema being `lms` (raw) or `analytics` (a model)."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def parse_select(sql: str, path: Path) -> exp.Query:
    """The one SELECT (or set operation / WITH ... SELECT) a model file must hold."""
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as error:
        first = error.errors[0] if error.errors else {}
        at = f" at line {first['line']}, column {first['col']} of the rendered SQL" if "line" in first else ""
        what = str(first.get("description", error)).split(" <Token", 1)[0]
        raise ModelError(
            f"{path}: the SQL does not parse{at} ({what} {first.get('highlight', '')!r}); fix it"
        ) from None
    except SqlglotError as error:
        raise ModelError(f"{path}: the SQL does not parse: {error}; fix it") from None
    if len(statements) != 1:
        raise ModelError(f"{path}: holds {len(statements)} statements; a model is exactly one SELECT")
    statement = statements[0]
    if not isinstance(statement, exp.Query):
        kind = type(statement).__name__.upper()
        raise ModelError(f"{path}: is a {kind} statement; a model is exactly one SELECT (the build creates it)")
    return statement


def referenced_tables(query: exp.Query, path: Path) -> set[TableRef]:
    """Every schema-qualified table the query reads; unqualified names must be CTEs of the query."""
    cte_names = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    refs: set[TableRef] = set()
    for table in query.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            if isinstance(table.this, _ALLOWED_TABLE_FUNCTIONS):
                continue
            raise ModelError(
                f"{path}: reads from the table function {table.this.sql('duckdb')!r}; models may read only "
                f"{RAW_SCHEMA}.* and {MODEL_SCHEMA}.* tables, so that their lineage is known"
            )
        if table.catalog:
            raise ModelError(f"{path}: references {table.sql('duckdb')!r}; drop the database qualifier")
        if not table.db:
            if table.name in cte_names:
                continue
            raise ModelError(
                f"{path}: references the unqualified table {table.name!r}; write {RAW_SCHEMA}.{table.name} "
                f"for a synced table or {MODEL_SCHEMA}.{table.name} for a model"
            )
        refs.add(TableRef(table.db, table.name))
    return refs


def check_known(ref: TableRef, where: str, sources: dict[str, str], models: set[str], self_name: str) -> None:
    """`ref` must be a declared raw table or another model; else an error naming `where` and the table."""
    if ref.schema == RAW_SCHEMA and ref.name in sources:
        return
    if ref.schema == MODEL_SCHEMA and ref.name in models and ref.name != self_name:
        return
    if ref.schema == MODEL_SCHEMA and ref.name == self_name:
        raise ModelError(f"{where}: the model reads itself ({ref}); a model cannot depend on its own table")
    raise ModelError(
        f"{where}: references unknown table {ref}. Known raw tables: "
        f"{', '.join(f'{RAW_SCHEMA}.{s}' for s in sorted(sources))}; known models: "
        f"{', '.join(f'{MODEL_SCHEMA}.{m}' for m in sorted(models))} (ref('<model>') and source('{RAW_SCHEMA}', "
        f"'<table>') compile to these). Fix the name, add the model, or declare the raw table in sources.yml"
    )
