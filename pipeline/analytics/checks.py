"""Data tests of a model as SQL: each counts what breaks it and samples a few offending values.

Semantics (dbt's, written down); the count is of rows, except for unique (of duplicated keys):
- unique: no two rows share the value(s) of the columns; nulls count as a value, so two rows with the same
  columns null are duplicates.
- not_null: no row has the column null.
- accepted_values: every non-null value is in the list.
- relationships: every non-null value exists in the target table's field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from pipeline.analytics.model_tests import ModelTest
from pipeline.analytics.sql import quote, relation
from pipeline.warehouse import duplicated_values, scalar

SAMPLE_SIZE = 5


@dataclass(frozen=True)
class TestOutcome:
    test: ModelTest
    failing_rows: int  # rows that break the test; for unique, duplicated keys
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


def run_tests(conn: duckdb.DuckDBPyConnection, tests: Sequence[ModelTest], rel: str) -> list[TestOutcome]:
    """Run a model's tests against the relation `rel` (a quoted schema.name: the not-yet-swapped build).
    Row-level tests (not_null, accepted_values) share one scan: a staging view over millions of rows is
    read once for all of them, not once per test."""
    row_level = [t for t in tests if t.kind in _ROW_LEVEL]
    counts: dict[int, int] = {}
    if row_level:
        conditions = [_violation(t) for t in row_level]
        aggregates = ", ".join(f"count(*) FILTER (WHERE {sql})" for sql, _ in conditions)
        params = [p for _, ps in conditions for p in ps]
        found = conn.execute(f"SELECT {aggregates} FROM {rel}", params).fetchall()[0]
        counts = {id(t): int(n) for t, n in zip(row_level, found, strict=True)}
    outcomes = []
    for test in tests:
        failing_sql, params = _failing_values_sql(test, rel)
        if id(test) in counts:
            count = counts[id(test)]
        elif test.kind == "unique":
            count = duplicated_values(conn, rel, test.columns)
        else:
            count = int(scalar(conn, _count_sql(test, rel), params))
        sample: list[Any] = []
        if count:
            rows = conn.execute(f"SELECT * FROM ({failing_sql}) LIMIT {SAMPLE_SIZE}", params).fetchall()
            sample = [row[0] if len(row) == 1 else list(row) for row in rows]
        outcomes.append(TestOutcome(test, count, sample))
    return outcomes


_ROW_LEVEL = ("not_null", "accepted_values")


def _violation(test: ModelTest) -> tuple[str, list[Any]]:
    """The condition a row breaking a row-level test meets, and its parameters."""
    col = quote(test.columns[0])
    if test.kind == "not_null":
        return f"{col} IS NULL", []
    return f"{col} IS NOT NULL AND NOT list_contains(?, {col})", [list(test.values)]


def _count_sql(test: ModelTest, rel: str) -> str:
    """Rows that break a relationships test (a unique test's count: warehouse.checks.duplicated_values)."""
    parent_missing, _ = _orphans(test, rel)
    return f"SELECT count(*) FROM {rel} AS c WHERE {parent_missing}"


def _failing_values_sql(test: ModelTest, rel: str) -> tuple[str, list[Any]]:
    """Distinct offending values (or keys), for the sample shown with a failure."""
    cols = [quote(c) for c in test.columns]
    if test.kind == "unique":
        return f"SELECT {', '.join(cols)} FROM {rel} GROUP BY ALL HAVING count(*) > 1", []
    if test.kind == "relationships":
        parent_missing, _ = _orphans(test, rel)
        return f"SELECT DISTINCT c.{cols[0]} FROM {rel} AS c WHERE {parent_missing}", []
    condition, params = _violation(test)
    return f"SELECT DISTINCT {cols[0]} FROM {rel} WHERE {condition}", params


def _orphans(test: ModelTest, rel: str) -> tuple[str, list[Any]]:
    assert test.to is not None and test.to_field is not None
    col, parent = quote(test.columns[0]), relation(test.to.schema, test.to.name)
    return (
        f"c.{col} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {parent} AS p WHERE p.{quote(test.to_field)} = c.{col})",
        [],
    )
