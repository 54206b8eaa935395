"""DuckDB's memory_limit (pipeline/warehouse/connection.py): every connection works within the work limit; a first
load of FULL_MEMORY_ROWS or more into an empty table gets the whole memory_limit for its sorted insert, for the
rest of that commit's connection; the settings reach both."""

from __future__ import annotations

from pathlib import Path

import pytest
from warehouse_helpers import ANSWERS, T0, answer, batch

from pipeline.settings import Settings
from pipeline.warehouse import Warehouse
from pipeline.warehouse import upsert
from pipeline.warehouse.connection import scalar

MIB = 1024 * 1024


def _limit(conn) -> int:  # type: ignore[no-untyped-def]
    number, unit = scalar(conn, "SELECT current_setting('memory_limit')").split()
    return round(float(number) * {"KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}[unit])


def _warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "w.duckdb", tmp_path / "lake", memory_limit="300MiB", work_memory_limit="120MiB")


def test_every_connection_works_within_the_work_limit(tmp_path: Path) -> None:
    wh = _warehouse(tmp_path)
    wh.ensure_tables([ANSWERS])
    for read_only in (False, True):
        with wh.connect(read_only=read_only) as conn:
            assert _limit(conn) == 120 * MIB


@pytest.mark.parametrize(("threshold", "expected_mib"), [(3, 300), (10_000, 120)])
def test_a_large_first_load_sorts_within_the_whole_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          threshold: int, expected_mib: int) -> None:
    monkeypatch.setattr(upsert, "FULL_MEMORY_ROWS", threshold)
    wh = _warehouse(tmp_path)
    with wh.one_connection() as conn:  # the commit's connection, seen after the commit
        with wh.load("answers", "run-1", T0) as load:
            load.write(ANSWERS, batch(ANSWERS, [answer(f"al{i}", "q1") for i in range(5)]))
            load.commit()
        assert _limit(conn) == expected_mib * MIB
        assert scalar(conn, "SELECT count(*) FROM lms.answers") == 5
    with wh.connect() as conn:  # a new open starts from the work limit again
        assert _limit(conn) == 120 * MIB


def test_the_settings_reach_the_connections(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path), duckdb_memory_limit="256MiB", duckdb_work_memory_limit="100MiB")
    wh = Warehouse.from_settings(settings)
    wh.ensure_tables([ANSWERS])
    with wh.connect(read_only=True) as conn:
        assert _limit(conn) == 100 * MIB
        assert scalar(conn, "SELECT getvariable('lessonsync_memory_limit')") == "256MiB"
