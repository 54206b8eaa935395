"""Full refreshes at the default DuckDB settings (memory limit chosen from the machine, all cores), twice in a
row on one warehouse: each fetches every answer again and is exact. The second stages every answer against a full
table, the statement that ran out of memory when a hash join fed a sort in one statement
(pipeline/warehouse/merge/staging.py). The same statement at scale small, with peak RSS, is `make soak`'s
(bench/soak.py: full refreshes repeated on one warehouse at default settings, each verified exact)."""

import os

import duckdb
import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import local_stack


@pytest.mark.slow
def test_two_full_refreshes_with_default_settings_are_exact(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("LESSONSYNC_DUCKDB_")]:
        monkeypatch.delenv(name)
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.advance(hours=48)  # activity: answers updated after their first version
        for _ in range(2):
            report = stack.sync(full_refresh=True, select=RAW)
            assert report.success, report.error
            assert_warehouse_equals_platform(stack)
            with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
                (answers,) = conn.execute("SELECT count(*) FROM lms.answers").fetchone()
            assert answers > 0
            assert report.materializations["lms/answers"]["rows_fetched"] == answers  # every answer, again
