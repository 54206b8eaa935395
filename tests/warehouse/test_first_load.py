"""A big first load builds its key index in slices (pipeline/warehouse/firstload.py): same rows, same
counts, same primary key as the one-shot load; later loads, replays and rebuilds agree; and a SIGKILL
between slices leaves the old warehouse (empty tables, no cursor), whose next commit cleans up."""

from __future__ import annotations

import shutil
import signal
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from test_crash import ROWS, WORKER, fingerprint, worker_env
from warehouse_helpers import ALL_SPECS, ANSWER_RESULTS, ANSWERS, T0, answers_generation, digest, make_warehouse

from pipeline.warehouse import Warehouse, duplicate_keys, hooks
from pipeline.warehouse.rebuild import rebuild_into

SLICE = 1_500  # a first load of 5,000 answers and their results is built in slices

DATA_TABLES = ("answers", "answer_results")


def commit(wh: Warehouse, generation: int) -> dict[str, dict[str, int]]:
    answers, results = answers_generation(generation, ROWS)
    with wh.load("answers", f"gen-{generation}", T0) as load:
        load.write(ANSWERS, answers)
        load.write(ANSWER_RESULTS, results)
        result = load.commit(cursor=T0 + timedelta(hours=generation))
    return {name: stats.as_dict() for name, stats in result.tables.items()}


def data(path: Path) -> dict[str, object]:
    """Every column of the data tables (load times included), the declared keys, and no shadow table left."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return {
            **{name: digest(conn, f"lms.{name}") for name in DATA_TABLES},
            "keys": conn.execute("SELECT table_name, constraint_column_names FROM duckdb_constraints() "
                                 "WHERE schema_name = 'lms' AND constraint_type = 'PRIMARY KEY' "
                                 "AND table_name IN ('answers', 'answer_results') ORDER BY 1").fetchall(),
            "tables": conn.execute("SELECT list(table_name ORDER BY table_name) FROM duckdb_tables() "
                                   "WHERE schema_name = 'lms'").fetchone()[0],
        }
    finally:
        conn.close()


def test_sliced_first_load_equals_one_shot_load_then_upserts_replays_and_rebuilds_agree(tmp_path: Path) -> None:
    sliced, whole = make_warehouse(tmp_path / "sliced", slice_rows=SLICE), make_warehouse(tmp_path / "whole",
                                                                                           slice_rows=None)
    for wh in (sliced, whole):
        wh.ensure_tables(ALL_SPECS)
    points: list[str] = []
    hooks.on_point(points.append)
    try:
        assert commit(sliced, 1) == commit(whole, 1)
    finally:
        hooks.on_point(None)
    assert points.count("first_load_slice") == 4 + 7  # 5,000 answers and 10,000 results in slices of 1,500
    assert data(sliced.path) == data(whole.path)
    assert data(sliced.path)["keys"] == [("answer_results", [*ANSWER_RESULTS.key]), ("answers", [*ANSWERS.key])]
    with sliced.connect() as conn:
        with pytest.raises(duckdb.ConstraintException):  # the key is enforced, not just declared
            conn.execute("INSERT INTO lms.answers SELECT * FROM lms.answers LIMIT 1")
    assert commit(sliced, 2) == commit(whole, 2)
    assert data(sliced.path) == data(whole.path)
    with sliced.connect(read_only=True) as conn:
        assert duplicate_keys(conn, "answer_results", trust_primary_key=False) == 0
    for slices in (SLICE, None):  # a rebuild replays the first load sliced or whole: same warehouse
        rebuilt = tmp_path / f"rebuilt-{slices}.duckdb"
        rebuild_into(sliced.lake_dir, rebuilt, sliced.connection_settings, "auto", slice_rows=slices)
        assert data(rebuilt) == data(sliced.path)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["first_load_slice", "applied", "manifest_written"])
def test_sigkill_during_a_sliced_first_load_leaves_old_or_new(tmp_path: Path, kill_at: str) -> None:
    import subprocess
    import sys

    base = tmp_path / "base"
    make_warehouse(base).ensure_tables(ALL_SPECS)
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    commit(make_warehouse(reference, slice_rows=SLICE), 2)
    old, new = fingerprint(base / "warehouse.duckdb"), fingerprint(reference / "warehouse.duckdb")

    root = tmp_path / "wh"
    shutil.copytree(base, root)
    worker = subprocess.run([sys.executable, str(WORKER), str(root), kill_at, str(ROWS), str(SLICE)],
                            capture_output=True, text=True, env=worker_env(), cwd=WORKER.parent, timeout=180)
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    raw = fingerprint(root / "warehouse.duckdb")
    assert raw == old  # killed before COMMIT: no row, no cursor, whatever the slices wrote
    wh = make_warehouse(root, slice_rows=SLICE)
    replayed = wh.recover()
    assert replayed == (1 if kill_at == "manifest_written" else 0)
    if not replayed:
        commit(wh, 2)
    assert fingerprint(wh.path) == new
    assert not [t for t in data(wh.path)["tables"] if t.startswith("_first_")]


def test_first_load_slices_run_under_the_first_load_cap_and_the_limit_is_set_back(tmp_path: Path) -> None:
    from pipeline.warehouse import firstload

    wh = make_warehouse(tmp_path, slice_rows=SLICE, memory_limit="3GB")
    wh.ensure_tables(ALL_SPECS)
    seen: list[str] = []
    conns: list[duckdb.DuckDBPyConnection] = []
    original = firstload._build

    def spy(conn: duckdb.DuckDBPyConnection, *args: object) -> str:
        seen.append(conn.execute("SELECT current_setting('memory_limit')").fetchone()[0])
        conns.append(conn)
        return original(conn, *args)

    firstload._build = spy
    try:
        commit(wh, 1)
    finally:
        firstload._build = original
    assert seen == ["400.0 MiB", "400.0 MiB"]  # first_load_memory_limit(1,500 rows): the 400 MiB floor
    assert firstload.size_bytes("3GB") == 3 * 10**9 and firstload.size_bytes("512MiB") == 2**29
    assert firstload.size_bytes("80%") is None
    with duckdb.connect(config={"memory_limit": "3GB"}) as conn:
        with firstload.capped_memory(conn, "3GB", "512MB"):
            assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "488.2 MiB"
        assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "2.7 GiB"  # set back
        with firstload.capped_memory(conn, "256MB", "512MB"):  # a lower limit is never raised
            assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "2.7 GiB"
        with pytest.raises(RuntimeError), firstload.capped_memory(conn, "3GB", "512MB"):
            raise RuntimeError("a failed slice")
        assert conn.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "2.7 GiB"
    assert firstload.size_bytes(firstload.first_load_memory_limit(2_000_000)) == 1_200_000_000  # 600 bytes a row
