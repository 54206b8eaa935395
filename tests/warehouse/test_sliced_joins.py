"""A load joined against a table that holds rows is joined a slice of a key column at a time when its rows are
large for DuckDB's memory limit (staging.key_slices): staging and the replacement of children. Sliced or whole,
the warehouse ends with the same rows, load times included, and the same counts."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from test_first_load import commit, data
from warehouse_helpers import ALL_SPECS, make_warehouse

from pipeline.warehouse.merge import staging


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
