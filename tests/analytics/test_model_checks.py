"""Each kind of data test counts exactly what breaks it, even when several share one scan."""

from __future__ import annotations

import duckdb

from pipeline.analytics.checks import run_tests
from pipeline.analytics.lineage import TableRef
from pipeline.analytics.model_tests import ModelTest


def data_test(
    kind: str,
    *columns: str,
    values: tuple = (),
    to: TableRef | None = None,
    field: str | None = None,
    severity: str = "error",
) -> ModelTest:
    return ModelTest("m", kind, columns, values, to, field, severity, "m.yml")


def test_every_kind_counts_its_own_failures() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA s; CREATE TABLE s.parent AS SELECT * FROM (VALUES ('p1'), ('p2')) t(id)")
    conn.execute(
        "CREATE TABLE s.child AS SELECT * FROM (VALUES "
        "(1, 'x', 'p1'), (1, 'y', 'p9'), (2, 'z', NULL), (NULL, 'z', 'p8'), (3, NULL, 'p8')) t(a, b, c)"
    )
    tests = [
        data_test("not_null", "a"),
        data_test("accepted_values", "b", values=("x", "y")),
        data_test("unique", "a"),
        data_test("relationships", "c", to=TableRef("s", "parent"), field="id"),
        data_test("not_null", "b"),
        data_test("unique", "a", "b"),
        data_test("accepted_values", "a", values=(1, 2, 3)),
    ]
    outcomes = run_tests(conn, tests, '"s"."child"')
    got = [(o.test.kind, o.test.columns, o.failing_rows, sorted(o.sample, key=str)) for o in outcomes]
    assert got == [
        ("not_null", ("a",), 1, [None]),
        ("accepted_values", ("b",), 2, ["z"]),  # two rows, one distinct value
        ("unique", ("a",), 1, [1]),  # one duplicated key
        ("relationships", ("c",), 3, ["p8", "p9"]),  # three rows, two distinct orphans; NULL is no orphan
        ("not_null", ("b",), 1, [None]),
        ("unique", ("a", "b"), 0, []),
        ("accepted_values", ("a",), 0, []),
    ]
    assert [o.passed for o in outcomes] == [False, False, False, False, False, True, True]


def test_warn_severity_fails_without_blocking() -> None:
    conn = duckdb.connect()
    conn.execute("CREATE TABLE t AS SELECT NULL::INT AS a")
    (error,) = run_tests(conn, [data_test("not_null", "a")], "t")
    (warn,) = run_tests(conn, [data_test("not_null", "a", severity="warn")], "t")
    assert error.blocks and not warn.blocks and not warn.passed
    assert "FAILED on 1 row(s)" in warn.summary()
