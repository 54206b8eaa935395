"""A big first load (5,000 answers, 10,000 results) into tables without a key index: the rows come out in key
order (staging's range-limited scans rely on it), later loads, replays and rebuilds agree, and a SIGKILL during
the first load leaves the old warehouse (empty tables, no cursor) or the new one."""

from __future__ import annotations

import shutil
import signal
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from test_crash import ROWS, WORKER, fingerprint, worker_env
from warehouse_helpers import ALL_SPECS, ANSWER_RESULTS, ANSWERS, T0, answers_generation, digest, make_warehouse

from pipeline.warehouse import Warehouse, duplicate_keys
from pipeline.warehouse.rebuild import rebuild_into

DATA_TABLES = ("answers", "answer_results")


def commit(wh: Warehouse, generation: int) -> dict[str, dict[str, int]]:
    answers, results = answers_generation(generation, ROWS)
    with wh.load("answers", f"gen-{generation}", T0) as load:
        load.write(ANSWERS, answers)
        load.write(ANSWER_RESULTS, results)
        result = load.commit(cursor=T0 + timedelta(hours=generation))
    return {name: stats.as_dict() for name, stats in result.tables.items()}


def data(path: Path) -> dict[str, object]:
    """Every column of the data tables (load times included), whether each is in key order, and the tables."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return {
            **{name: digest(conn, f"lms.{name}") for name in DATA_TABLES},
            "in_key_order": {name: in_key_order(conn, name) for name in DATA_TABLES},
            "tables": conn.execute("SELECT list(table_name ORDER BY table_name) FROM duckdb_tables() "
                                   "WHERE schema_name = 'lms'").fetchone()[0],
        }
    finally:
        conn.close()


def in_key_order(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    key = ", ".join({"answers": ANSWERS, "answer_results": ANSWER_RESULTS}[table].key)
    return bool(conn.execute(f"SELECT bool_and(position = rank) FROM (SELECT row_number() OVER (ORDER BY rowid) "
                             f"AS position, row_number() OVER (ORDER BY {key}) AS rank FROM lms.{table})").fetchone()[0])


def test_first_load_in_key_order_then_upserts_replays_and_rebuilds_agree(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "wh")
    wh.ensure_tables(ALL_SPECS)
    first = commit(wh, 1)
    assert first["answers"]["inserted"] == ROWS and first["answer_results"]["inserted"] == 2 * ROWS
    assert data(wh.path)["in_key_order"] == {"answers": True, "answer_results": True}
    commit(wh, 2)
    with wh.connect(read_only=True) as conn:
        assert duplicate_keys(conn, "answers") == 0
        assert duplicate_keys(conn, "answer_results") == 0
    rebuilt = tmp_path / "rebuilt.duckdb"
    rebuild_into(wh.lake_dir, rebuilt, wh.connection_settings)
    assert data(rebuilt) == data(wh.path)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["applied", "manifest_written"])
def test_sigkill_during_a_first_load_leaves_old_or_new(tmp_path: Path, kill_at: str) -> None:
    import subprocess
    import sys

    base = tmp_path / "base"
    make_warehouse(base).ensure_tables(ALL_SPECS)
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    commit(make_warehouse(reference), 2)
    old, new = fingerprint(base / "warehouse.duckdb"), fingerprint(reference / "warehouse.duckdb")

    root = tmp_path / "wh"
    shutil.copytree(base, root)
    worker = subprocess.run([sys.executable, str(WORKER), str(root), kill_at, str(ROWS)],
                            capture_output=True, text=True, env=worker_env(), cwd=WORKER.parent, timeout=180)
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert fingerprint(root / "warehouse.duckdb") == old  # killed before COMMIT: no row, no cursor
    wh = make_warehouse(root)
    replayed = wh.recover()
    assert replayed == (1 if kill_at == "manifest_written" else 0)
    if not replayed:
        commit(wh, 2)
    assert fingerprint(wh.path) == new
