"""pipeline/verify.py is the oracle of every exactness test and of the demo: it must see any one value that differs
from the platform. A tiny platform is synced (the raw streams, no Dagster), then, one at a time inside a
transaction that is rolled back, one value of every data column of every type is changed in one live row: the
comparison reports exactly that one mismatch, naming the column; a deleted row is missing and an invented one is
unexpected."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from pipeline.contract.streams import SYNC_STREAMS, stream_tables
from pipeline.raw.runner import RawRun, RawSync
from pipeline.settings import Settings
from pipeline.verify import LOAD_METADATA, compare_table, compare_warehouse
from pipeline.warehouse import Warehouse, read_table_def
from simulator import SimulatorConfig, SimulatorHandle, start_simulator

# A different value of each column type, as SQL over the column named by `{c}`.
CHANGED = {
    "VARCHAR": "{c} || 'x'",
    "BIGINT": "{c} + 1",
    "INTEGER": "{c} + 1",
    "DOUBLE": "{c} + 0.5",
    "BOOLEAN": "NOT {c}",
    "DATE": "{c} + 1",
    "TIMESTAMP WITH TIME ZONE": "{c} + INTERVAL 1 MILLISECOND",
    "JSON": """'["changed"]'""",
    "VARCHAR[]": "list_append({c}, 'x')",
}


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulatorHandle, Path]]:
    tmp = tmp_path_factory.mktemp("verify")
    with start_simulator(SimulatorConfig(seed=11, scale="tiny")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=50, data_dir=str(tmp))
        warehouse = Warehouse(tmp / "warehouse.duckdb", tmp / "lake")
        loads = list(RawSync(warehouse, settings, logging.getLogger(__name__), RawRun("run-1")).run(SYNC_STREAMS))
        assert loads and all(load.stream in SYNC_STREAMS for load in loads)
        yield sim, warehouse.path


def test_the_synced_warehouse_equals_the_platform(synced: tuple[SimulatorHandle, Path]) -> None:
    sim, path = synced
    with duckdb.connect(str(path), read_only=True) as conn:
        diffs = compare_warehouse(conn, sim, stream_tables())
    assert [d.summary() for d in diffs if not d.equal] == []
    assert all(d.actual_rows > 0 for d in diffs), [(d.table, d.actual_rows) for d in diffs]


def test_one_changed_value_of_any_column_is_the_one_mismatch_named(synced: tuple[SimulatorHandle, Path]) -> None:
    sim, path = synced
    seen_types: set[str] = set()
    changed = 0
    with duckdb.connect(str(path)) as conn:
        for table in stream_tables():
            definition = read_table_def(conn, table)
            assert definition is not None
            columns = dict(definition.columns)
            live = "deleted_at IS NULL AND " if "deleted_at" in columns else ""
            for column, kind in columns.items():
                if kind not in CHANGED or column in LOAD_METADATA or column in definition.key:
                    continue
                target = conn.execute(
                    f'SELECT min(rowid) FROM lms."{table}" WHERE {live}"{column}" IS NOT NULL'
                ).fetchone()[0]
                if target is None:  # never sent at this scale
                    continue
                conn.execute("BEGIN")
                try:
                    expression = CHANGED[kind].format(c=f'"{column}"')
                    conn.execute(f'UPDATE lms."{table}" SET "{column}" = {expression} WHERE rowid = ?', [target])
                    diff = compare_table(conn, sim, table)
                finally:
                    conn.execute("ROLLBACK")
                assert diff.mismatch_count == 1, f"{table}.{column} ({kind}) changed: {diff.summary()}"
                assert f" {column}: warehouse=" in diff.mismatches[0], diff.mismatches
                assert not diff.missing and not diff.unexpected
                seen_types.add(kind)
                changed += 1
        assert changed >= 30, changed
        assert set(CHANGED) - {"BIGINT", "INTEGER", "DATE"} <= seen_types, seen_types  # integers are keys here
        assert compare_table(conn, sim, "answers").equal  # every change was rolled back


def test_a_deleted_row_is_missing_and_an_invented_one_unexpected(synced: tuple[SimulatorHandle, Path]) -> None:
    sim, path = synced
    with duckdb.connect(str(path)) as conn:
        conn.execute("BEGIN")
        try:
            conn.execute("DELETE FROM lms.categories WHERE rowid = (SELECT min(rowid) FROM lms.categories)")
            assert compare_table(conn, sim, "categories").missing != []
            conn.execute(
                "INSERT INTO lms.categories BY NAME SELECT * REPLACE ('invented' AS id) FROM lms.categories LIMIT 1"
            )
            diff = compare_table(conn, sim, "categories")
        finally:
            conn.execute("ROLLBACK")
    assert len(diff.missing) == 1 and diff.unexpected == [("invented",)], diff.summary()
