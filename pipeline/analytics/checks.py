"""Data tests of a model as SQL: each counts the rows that break it and samples a few of them.

Semantics (dbt's, written down):
- unique: no two rows share the value(s) of the columns; nulls count as a value, so two rows with the same
  columns null are duplicates.
- not_null: no row has the column null.
- accepted_values: every non-null value is in the list.
- relationships: every non-null value exists in the target table's field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from pipeline.analytics.model_tests import ModelTest
from pipeline.analytics.sql import quote, relation, scalar

SAMPLE_SIZE = 5


@dataclass(frozen=True)
class TestOutcome:
    test: ModelTest
    failing_rows: int
    sample: list[Any]

    @property
    def passed(self) -> bool:
        return self.failing_rows == 0

    @property
    def blocks(self) -> bool:
        """A failed error-severity test keeps the previous build and skips what is downstream."""
        return not self.passed and self.test.severity == "error"

    def summary(self) -> str:
        status = "passed" if self.passed else f"FAILED on {self.failing_rows} row(s), e.g. {self.sample}"
        return f"{self.test.model}.{self.test.name} ({self.test.description}): {status}"


def run_test(conn: duckdb.DuckDBPyConnection, test: ModelTest, rel: str) -> TestOutcome:
    """Run `test` against the relation `rel` (a quoted schema.name, e.g. the not-yet-swapped build)."""
    failing_sql, params = _failing_rows_sql(test, rel)
    count = scalar(conn, f"SELECT count(*) FROM ({failing_sql})", params)
    sample: list[Any] = []
    if count:
        rows = conn.execute(f"SELECT * FROM ({failing_sql}) LIMIT {SAMPLE_SIZE}", params).fetchall()
        sample = [row[0] if len(row) == 1 else list(row) for row in rows]
    return TestOutcome(test, int(count), sample)


def _failing_rows_sql(test: ModelTest, rel: str) -> tuple[str, list[Any]]:
    cols = [quote(c) for c in test.columns]
    col = cols[0]
    if test.kind == "unique":
        keys = ", ".join(cols)
        return f"SELECT {keys} FROM {rel} GROUP BY ALL HAVING count(*) > 1", []
    if test.kind == "not_null":
        return f"SELECT {col} FROM {rel} WHERE {col} IS NULL", []
    if test.kind == "accepted_values":
        return f"SELECT DISTINCT {col} FROM {rel} WHERE {col} IS NOT NULL AND NOT list_contains(?, {col})", [
            list(test.values)
        ]
    if test.kind == "relationships":
        assert test.to is not None and test.to_field is not None
        parent = relation(test.to.schema, test.to.name)
        return (
            f"SELECT DISTINCT c.{col} FROM {rel} AS c WHERE c.{col} IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {parent} AS p WHERE p.{quote(test.to_field)} = c.{col})",
            [],
        )
    raise ValueError(f"unknown test kind {test.kind!r}")
