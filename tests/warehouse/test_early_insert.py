"""A first load inserted while it is still written (pipeline/warehouse/loading/early_insert.py): the parts go into the empty
tables inside the commit's transaction as they close, invisible until the COMMIT, and the warehouse ends exactly as
after the ordinary first load (every column, load times included), as after a rebuild from the lake, and with the
documented winner of a key written twice. It is no first load when a table holds rows; a failed early insert leaves
the ordinary commit; a SIGKILL during the early inserts leaves the old warehouse."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
from test_crash import ROWS, WORKER, fingerprint, worker_env
from test_first_load import data
from warehouse_helpers import (
    ALL_SPECS,
    ANSWER_RESULTS,
    ANSWERS,
    T0,
    answer,
    answers_generation,
    batch,
    load_once,
    make_warehouse,
    wait_for_parts,
    write_in_slices,
)

from pipeline.warehouse import TableLoadStats, Warehouse, hooks
from pipeline.warehouse.loading.early_insert import EarlyFirstLoad
from pipeline.warehouse.upkeep.rebuild import rebuild_into

PART_ROWS = 1_500  # the answers and their results close parts while written, and end with one open


def commit_generation(wh: Warehouse, *, early: bool) -> tuple[dict[str, TableLoadStats], EarlyFirstLoad | None]:
    """Generation 1 of the answers (5,000 answers, 10,000 results) as one load, inserted early or not."""
    answers, results = answers_generation(1, ROWS)
    with wh.load("answers", "gen-1", T0, part_rows=PART_ROWS) as load, wh.one_connection() as conn:
        started = EarlyFirstLoad.begin(conn, load, (ANSWERS, ANSWER_RESULTS)) if early else None
        assert (started is not None) == early
        write_in_slices(load, ANSWERS, answers, started)
        write_in_slices(load, ANSWER_RESULTS, results, started)
        if started is not None:  # in the load's transaction before its commit, in no other
            assert started.rows_while_fetching == {"answers": 3 * PART_ROWS, "answer_results": 6 * PART_ROWS}
            assert conn.execute("SELECT count(*) FROM lms.answer_results").fetchone()[0] == 6 * PART_ROWS
        result = load.commit(cursor=T0 + timedelta(hours=1), early=started)
    return result.tables, started


def test_an_early_first_load_equals_the_ordinary_one_and_its_rebuild(tmp_path: Path) -> None:
    inserted: list[str] = []
    hooks.on_point(lambda point: inserted.append(point) if point.startswith("early_inserted:") else None)
    try:
        ordinary, _ = commit_generation(make_warehouse(tmp_path / "ordinary"), early=False)
        wh = make_warehouse(tmp_path / "early")
        early_stats, early = commit_generation(wh, early=True)
    finally:
        hooks.on_point(None)
    assert early is not None and early.error is None
    assert set(inserted) == {"early_inserted:answers", "early_inserted:answer_results"}
    assert early_stats == ordinary
    assert early_stats["answers"] == TableLoadStats(fetched=ROWS, inserted=ROWS)
    assert data(wh.path) == data(tmp_path / "ordinary" / "warehouse.duckdb")  # load times included
    rebuilt = tmp_path / "rebuilt.duckdb"
    rebuild_into(wh.lake_dir, rebuilt, wh.connection_settings)
    assert data(rebuilt) == data(wh.path)


def test_a_key_written_twice_takes_the_rows_out_and_keeps_the_documented_winner(tmp_path: Path) -> None:
    """Three rows a part: the first part goes in early, then the second part repeats two of its keys. The load's
    rows are taken out and inserted deduped: the greatest cursor wins, a tie goes to the row written last."""
    wh = make_warehouse(tmp_path, part_rows=3, row_group_rows=3)
    with wh.load("answers", "run", T0) as load, wh.one_connection() as conn:
        early = EarlyFirstLoad.begin(conn, load, (ANSWERS,))
        assert early is not None
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a1", "q1", minutes=9, user="newest"),
                    answer("b1", "q1", minutes=1, user="unique"),
                    answer("a2", "q1", minutes=5, user="tie, earlier part"),
                ],
            ),
        )
        wait_for_parts(load, "answers", 1)
        early.insert_ready()
        assert early.rows_while_fetching == {"answers": 3}
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a2", "q1", minutes=5, user="tie, later part"),
                    answer("a1", "q1", minutes=3, user="older"),
                    answer("a0", "q1", minutes=1, user="unique too"),
                ],
            ),
        )
        result = load.commit(early=early)
        assert early.rows_while_fetching == {"answers": 0}  # taken out again
    assert result.tables["answers"] == TableLoadStats(fetched=6, inserted=4)
    with wh.connect(read_only=True) as conn:
        got = conn.execute("SELECT active_lesson_id, user_id FROM lms.answers ORDER BY 1").fetchall()
    assert got == [("a0", "unique too"), ("a1", "newest"), ("a2", "tie, later part"), ("b1", "unique")]


def test_a_table_holding_rows_is_no_first_load(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path)
    load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1")])])
    with wh.load("answers", "run", T0) as load, wh.one_connection() as conn:
        assert EarlyFirstLoad.begin(conn, load, (ANSWERS, ANSWER_RESULTS)) is None
        conn.begin()  # nothing was left begun
        conn.rollback()
        load.write(ANSWERS, batch(ANSWERS, [answer("a2", "q1")]))
        assert load.commit().tables["answers"] == TableLoadStats(fetched=1, inserted=1)


def test_a_load_too_large_to_insert_early_begins_nothing_without_a_mirror_to_write_for(tmp_path: Path) -> None:
    """Without inserts only the Iceberg mirror's files would be written while fetched: with no mirror there is
    nothing to do, so no transaction is begun and the commit is the ordinary one."""
    wh = make_warehouse(tmp_path)
    assert wh.table_mirror is None
    with wh.load("answers", "run", T0) as load, wh.one_connection() as conn:
        assert EarlyFirstLoad.begin(conn, load, (ANSWERS, ANSWER_RESULTS), inserts=False) is None
        conn.begin()  # nothing was left begun
        conn.rollback()
        load.write(ANSWERS, batch(ANSWERS, [answer("a1", "q1")]))
        assert load.commit().tables["answers"] == TableLoadStats(fetched=1, inserted=1)


def test_a_failed_early_insert_leaves_the_ordinary_commit(tmp_path: Path) -> None:
    """The load writes its answers with another spec than the one the early inserts began with (a column more):
    the early inserts stop and roll back, and the commit evolves the table and inserts the load as always."""
    wider = replace(ANSWERS, schema=ANSWERS.schema.append(pa.field("note", pa.string())))
    wh = make_warehouse(tmp_path, part_rows=2, row_group_rows=2)
    with wh.load("answers", "run", T0) as load, wh.one_connection() as conn:
        early = EarlyFirstLoad.begin(conn, load, (ANSWERS,))
        assert early is not None
        load.write(wider, batch(wider, [{**answer(f"a{n}", "q1"), "note": f"n{n}"} for n in range(5)]))
        wait_for_parts(load, "answers", 2)
        early.insert_ready()
        assert not early.open and "another spec" in str(early.error)
        result = load.commit(early=early)
    assert result.tables["answers"] == TableLoadStats(fetched=5, inserted=5)
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT list(note ORDER BY note) FROM lms.answers").fetchone()[0] == [
            f"n{n}" for n in range(5)
        ]


def test_sigkill_during_the_early_inserts_leaves_the_old_warehouse(tmp_path: Path) -> None:
    base = tmp_path / "base"
    make_warehouse(base).ensure_tables(ALL_SPECS)
    root = tmp_path / "wh"
    shutil.copytree(base, root)
    worker = subprocess.run(
        [sys.executable, str(WORKER), str(root), "early_inserted:answers", str(ROWS), "--early"],
        capture_output=True,
        text=True,
        env=worker_env(),
        cwd=WORKER.parent,
        timeout=180,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert fingerprint(root / "warehouse.duckdb") == fingerprint(base / "warehouse.duckdb")  # no row, no cursor
    wh = make_warehouse(root)
    assert wh.recover() == 0  # no manifest was written
    finished = subprocess.run(
        [sys.executable, str(WORKER), str(root), "none", str(ROWS), "--early"],
        capture_output=True,
        text=True,
        env=worker_env(),
        cwd=WORKER.parent,
        timeout=180,
    )
    assert finished.returncode == 0, finished.stderr
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    subprocess.run(
        [sys.executable, str(WORKER), str(reference), "none", str(ROWS)],
        check=True,
        capture_output=True,
        text=True,
        env=worker_env(),
        cwd=WORKER.parent,
        timeout=180,
    )
    assert fingerprint(root / "warehouse.duckdb") == fingerprint(reference / "warehouse.duckdb")
