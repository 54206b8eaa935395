"""Assertions about a local stack, shared by the end-to-end tests (imported by name: tests/ is on sys.path)."""

import duckdb

from pipeline.stack import Stack
from pipeline.verify import compare_warehouse

RAW = ("key:lms/*",)  # every raw table and the certificates; analytics models have their own tests


def assert_warehouse_equals_platform(stack: Stack) -> None:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim)
    unequal = [d.summary() for d in diffs if not d.equal]
    assert not unequal, "warehouse differs from the platform:\n" + "\n".join(unequal)
