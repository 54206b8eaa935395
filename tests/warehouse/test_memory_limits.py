"""DuckDB's memory_limit (pipeline/warehouse/duck/connection.py): every connection works within the one limit the
settings give, a first load's unordered insert included."""

from __future__ import annotations

from pathlib import Path

import pytest
from warehouse_helpers import ANSWERS, T0, answer, batch

from pipeline.settings import Settings
from pipeline.warehouse import Warehouse
from pipeline.warehouse.duck.connection import scalar

MIB = 1024 * 1024


def _limit(conn) -> int:  # type: ignore[no-untyped-def]
    number, unit = scalar(conn, "SELECT current_setting('memory_limit')").split()
    return round(float(number) * {"KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}[unit])


def test_every_connection_works_within_the_limit(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "w.duckdb", tmp_path / "lake", memory_limit="120MiB")
    wh.ensure_tables([ANSWERS])
    for read_only in (False, True):
        with wh.connect(read_only=read_only) as conn:
            assert _limit(conn) == 120 * MIB


def test_a_first_load_keeps_the_limit_and_the_insertion_order(tmp_path: Path) -> None:
    """The first load inserts without keeping insertion order; the commit's connection gets it back, since later
    statements on it (an incremental load's new keys, ORDER BY key) rely on it."""
    wh = Warehouse(tmp_path / "w.duckdb", tmp_path / "lake", memory_limit="120MiB")
    with wh.one_connection() as conn:  # the commit's connection, seen after the commit
        with wh.load("answers", "run-1", T0) as load:
            load.write(ANSWERS, batch(ANSWERS, [answer(f"al{i}", "q1") for i in range(5)]))
            assert load.commit().tables["answers"].inserted == 5
        assert _limit(conn) == 120 * MIB
        assert scalar(conn, "SELECT current_setting('preserve_insertion_order')") is True
        assert conn.execute("SELECT list(active_lesson_id ORDER BY active_lesson_id) FROM lms.answers").fetchone()[
            0
        ] == [f"al{i}" for i in range(5)]


def test_the_setting_reaches_the_connections(tmp_path: Path) -> None:
    wh = Warehouse.from_settings(Settings(data_dir=str(tmp_path), duckdb_memory_limit="100MiB"))
    wh.ensure_tables([ANSWERS])
    with wh.connect(read_only=True) as conn:
        assert _limit(conn) == 100 * MIB


def test_the_default_limit_follows_the_machine(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """'auto': DuckDB's minimum per thread, never under the floor, at most a share of the available memory."""
    from pipeline.warehouse.duck import connection

    monkeypatch.setattr(connection, "available_memory", lambda: 64 * 1024 * MIB)
    assert connection.memory_limit_for_machine(2) == "240MiB"
    assert connection.memory_limit_for_machine(16) == "1920MiB"
    monkeypatch.setattr(connection, "available_memory", lambda: 2 * 1024 * MIB)  # a busy or small machine
    assert connection.memory_limit_for_machine(16) == "512MiB"
    monkeypatch.setattr(connection, "available_memory", lambda: 100 * MIB)
    assert connection.memory_limit_for_machine(16) == "240MiB"  # the floor: below it DuckDB fails instead
    monkeypatch.setattr(connection, "available_memory", lambda: None)  # not Linux: threads alone
    wh = Warehouse(Path("/nonexistent/w.duckdb"), Path("/nonexistent/lake"), threads=3)
    assert wh.connection_settings.memory_limit == "360MiB"
    assert Settings().duckdb_memory_limit == "auto"


def test_running_out_of_memory_names_the_setting_and_the_stream(tmp_path: Path) -> None:
    from pipeline.warehouse.errors import MemoryLimitError

    wh = Warehouse(tmp_path / "w.duckdb", tmp_path / "lake", memory_limit="1MiB", threads=1)
    rows = [answer(f"al{i:06d}", f"q{i % 7}") for i in range(60_000)]
    with pytest.raises(MemoryLimitError) as raised, wh.load("answers", "run-1", T0) as load:
        load.write(ANSWERS, batch(ANSWERS, rows))
        load.commit()
    message = str(raised.value)
    assert "LESSONSYNC_DUCKDB_MEMORY_LIMIT=1MiB" in message and "stream answers" in message
    assert "\n" not in message
