"""DuckDB's memory_limit per kind of connection (pipeline/warehouse/connection.py): writers get
`memory_limit` (a large first load sorts within it), read-only connections (the raw-table checks) the lower
`read_memory_limit`; a read-only request while this process writes the file shares the writer's instance."""

from __future__ import annotations

from pathlib import Path

from pipeline.settings import Settings
from pipeline.warehouse import Warehouse
from pipeline.warehouse.connection import scalar

MIB = 1024 * 1024


def _bytes(text: str) -> int:
    number, unit = text.split()
    return round(float(number) * {"KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}[unit])


def test_read_only_connections_get_the_read_limit_and_writers_the_write_limit(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "w.duckdb", tmp_path / "lake", memory_limit="300MiB", read_memory_limit="120MiB")
    wh.ensure_tables([])
    with wh.connect() as conn:
        assert _bytes(scalar(conn, "SELECT current_setting('memory_limit')")) == 300 * MIB
    with wh.connect(read_only=True) as conn:
        assert _bytes(scalar(conn, "SELECT current_setting('memory_limit')")) == 120 * MIB
    with wh.connect() as writer, wh.connect(read_only=True) as reader:  # one instance per file and process
        assert _bytes(scalar(reader, "SELECT current_setting('memory_limit')")) == 300 * MIB
        writer.execute("CREATE TABLE lms.seen AS SELECT 1 AS x")
        assert scalar(reader, "SELECT count(*) FROM lms.seen") == 1


def test_the_settings_reach_the_connections(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path), duckdb_memory_limit="256MiB", duckdb_read_memory_limit="100MiB")
    wh = Warehouse.from_settings(settings)
    wh.ensure_tables([])
    with wh.connect(read_only=True) as conn:
        assert _bytes(scalar(conn, "SELECT current_setting('memory_limit')")) == 100 * MIB
    assert wh.connection_settings.memory_limit == "256MiB"
