"""A load joined against a table that holds rows is joined a slice of a key column at a time when its rows are
large for DuckDB's memory limit (staging.key_slices): staging and the replacement of children. Sliced or whole,
the warehouse ends with the same rows, load times included, and the same counts."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import duckdb
import pytest
from test_first_load import commit, data
from warehouse_helpers import ALL_SPECS, make_warehouse

from pipeline.warehouse.merge import apply, staging


def test_a_load_joined_in_slices_gives_the_rows_of_one_joined_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    whole, sliced = make_warehouse(tmp_path / "whole"), make_warehouse(tmp_path / "sliced")
    for wh in (whole, sliced):
        wh.ensure_tables(ALL_SPECS)
    caplog.set_level(logging.INFO, logger=staging.__name__)
    counts_whole = [commit(whole, generation) for generation in (1, 2)]
    assert not [r for r in caplog.records if "slices" in r.getMessage()]  # 512MB holds these rows at once
    monkeypatch.setattr(staging, "memory_limit_bytes", lambda conn: 20_000)  # as if the rows were ~1,000x larger
    counts_sliced = [commit(sliced, generation) for generation in (1, 2)]
    slices = [int(m[1]) for r in caplog.records if (m := re.search(r"in (\d+) slices of", r.getMessage()))]
    # the second load: the answers staged, their results staged, the results of reloaded answers replaced
    assert len(slices) == 3 and min(slices) >= 4, slices
    assert counts_sliced == counts_whole
    assert counts_whole[1]["answer_results"]["deleted"] > 0  # children were replaced, so that part was sliced too
    assert data(sliced.path) == data(whole.path)


def test_rows_seen_again_unchanged_are_staged_as_their_key_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row a load brings again unchanged is only touched, by row id: its stage keeps the key and the linked
    columns, not its data (a full refresh stages every row of its tables so); a row that changes keeps all of it,
    and the warehouse ends with every value in place."""
    wh = make_warehouse(tmp_path / "w")
    wh.ensure_tables(ALL_SPECS)
    commit(wh, 1)
    staged: dict[str, dict[str, tuple[int, int]]] = {}
    data_column = {"answers": "user_id", "answer_results": "value"}

    def staged_then_counted(conn: duckdb.DuckDBPyConnection, stage: staging.Stage) -> dict[str, int]:
        column = data_column[stage.load.name]
        rows = conn.execute(f"SELECT _change, count(*), count({column}) FROM {stage.name} GROUP BY ALL").fetchall()
        staged[stage.load.name] = {change: (count, with_data) for change, count, with_data in rows}
        return staging.count_changes(conn, stage)

    monkeypatch.setattr(apply, "count_changes", staged_then_counted)
    counts = commit(wh, 2)
    for table in data_column:
        assert staged[table]["same"][0] > 0 and staged[table]["same"][1] == 0, staged[table]
        changed = {change: rows for change, rows in staged[table].items() if change != "same"}
        assert changed and all(count == with_data for count, with_data in changed.values()), staged[table]
    assert counts["answers"]["unchanged"] == staged["answers"]["same"][0]
    with duckdb.connect(str(wh.path), read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(user_id), count(lesson_id) FROM lms.answers").fetchall() == [
            (6_000, 6_000, 6_000)
        ]
        assert conn.execute("SELECT count(*) = count(value) FROM lms.answer_results").fetchall() == [(True,)]
