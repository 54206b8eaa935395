"""A big first load (5,000 answers, 10,000 results) into tables without a key index: later loads, replays and
rebuilds agree, and a SIGKILL during the first load leaves the old warehouse (empty tables, no cursor) or the new
one. A first load goes straight into its empty table (upsert.insert_first_load): duplicate keys across parts keep
the documented winner, a stale parent keeps its children out, and a parent's first load still replaces children
already there."""

from __future__ import annotations

import shutil
import signal
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from test_crash import ROWS, WORKER, fingerprint, worker_env
from warehouse_helpers import (
    ALL_SPECS,
    ANSWER_RESULTS,
    ANSWERS,
    T0,
    answer,
    answers_generation,
    batch,
    digest,
    load_once,
    make_warehouse,
    result,
)

from pipeline.contract.tables import TableSpec
from pipeline.warehouse import TableLoadStats, Warehouse, duplicate_keys
from pipeline.warehouse.upkeep.rebuild import rebuild_into

DATA_TABLES = ("answers", "answer_results")


def commit(wh: Warehouse, generation: int) -> dict[str, dict[str, int]]:
    answers, results = answers_generation(generation, ROWS)
    with wh.load("answers", f"gen-{generation}", T0) as load:
        load.write(ANSWERS, answers)
        load.write(ANSWER_RESULTS, results)
        result = load.commit(cursor=T0 + timedelta(hours=generation))
    return {name: stats.as_dict() for name, stats in result.tables.items()}


def data(path: Path) -> dict[str, object]:
    """Every column of the data tables (load times included), and the tables."""
    conn = duckdb.connect(str(path), read_only=True)
    try:
        return {
            **{name: digest(conn, f"lms.{name}") for name in DATA_TABLES},
            "tables": conn.execute(
                "SELECT list(table_name ORDER BY table_name) FROM duckdb_tables() WHERE schema_name = 'lms'"
            ).fetchone()[0],
        }
    finally:
        conn.close()


def test_a_first_load_then_upserts_replays_and_rebuilds_agree(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "wh")
    wh.ensure_tables(ALL_SPECS)
    first = commit(wh, 1)
    assert first["answers"]["inserted"] == ROWS and first["answer_results"]["inserted"] == 2 * ROWS
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
    worker = subprocess.run(
        [sys.executable, str(WORKER), str(root), kill_at, str(ROWS)],
        capture_output=True,
        text=True,
        env=worker_env(),
        cwd=WORKER.parent,
        timeout=180,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert fingerprint(root / "warehouse.duckdb") == old  # killed before COMMIT: no row, no cursor
    wh = make_warehouse(root)
    replayed = wh.recover()
    assert replayed == (1 if kill_at == "manifest_written" else 0)
    if not replayed:
        commit(wh, 2)
    assert fingerprint(wh.path) == new


def parts_of(wh: Warehouse, table: str) -> int:
    return len(list((wh.lake_dir / table).rglob("*.parquet")))


@pytest.mark.parametrize("target", ["empty", "holding other keys"])
def test_duplicate_keys_across_parts_keep_the_documented_winner(tmp_path: Path, target: str) -> None:
    """Three rows a part, so the duplicates lie in different parts: the greatest cursor wins even from the
    earlier part, and a tie goes to the row written last, i.e. the later part's row although its row number
    in its part is lower (an order by row number alone would pick the other). Both commit paths: the first
    load's direct insert (empty table) and staging (a table holding other keys)."""
    wh = make_warehouse(tmp_path, part_rows=3, row_group_rows=3)
    if target != "empty":
        load_once(wh, "answers", [(ANSWERS, [answer("z9", "q1", minutes=1)])])
    with wh.load("answers", "run", T0) as load:
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a1", "q1", minutes=9, user="newest"),  # greatest cursor, in the earlier part: wins
                    answer("b1", "q1", minutes=1, user="unique"),
                    answer("a2", "q1", minutes=5, user="tie, earlier part, row 2"),
                ],
            ),
        )
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a2", "q1", minutes=5, user="tie, later part, row 0"),  # written last: wins the tie
                    answer("a1", "q1", minutes=3, user="older"),
                    answer("a0", "q1", minutes=1, user="unique too"),
                ],
            ),
        )
        result = load.commit()
    assert parts_of(wh, "answers") == 2 + (target != "empty")
    assert result.tables["answers"] == TableLoadStats(fetched=6, inserted=4)
    with wh.connect(read_only=True) as conn:
        got = conn.execute(
            "SELECT active_lesson_id, user_id, last_date FROM lms.answers "
            "WHERE active_lesson_id <> 'z9' ORDER BY active_lesson_id"
        ).fetchall()
    assert got == [
        ("a0", "unique too", T0 + timedelta(minutes=1)),
        ("a1", "newest", T0 + timedelta(minutes=9)),
        ("a2", "tie, later part, row 0", T0 + timedelta(minutes=5)),
        ("b1", "unique", T0 + timedelta(minutes=1)),
    ]


def test_children_of_a_stale_parent_stay_out_of_their_first_load(tmp_path: Path) -> None:
    """answer_results is empty but answers is not: a stale answer's results must not go in (the direct first
    load is not taken while a parent row is stale), the new answer's results do."""
    wh = make_warehouse(tmp_path)
    load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1", minutes=10, user="newer")])])
    late = load_once(
        wh,
        "answers",
        [
            (ANSWERS, [answer("a1", "q1", minutes=2), answer("a2", "q1")]),
            (ANSWER_RESULTS, [result("a1", "q1", 0, "old"), result("a2", "q1", 0, "x"), result("a2", "q1", 1, "y")]),
        ],
    )
    assert late.tables["answers"] == TableLoadStats(fetched=2, inserted=1, stale=1)
    assert late.tables["answer_results"] == TableLoadStats(fetched=3, inserted=2, stale=1)
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT active_lesson_id, value FROM lms.answer_results ORDER BY rowid").fetchall() == [
            ("a2", "x"),
            ("a2", "y"),
        ]


def test_a_parents_first_load_still_replaces_the_children_already_there(tmp_path: Path) -> None:
    """The parent table is empty (its load goes in directly) while the child table holds rows of that parent:
    the parent's rows are still the reloaded parents whose children this load replaces."""
    wh = make_warehouse(tmp_path)
    load_once(wh, "answers", [(ANSWER_RESULTS, [result("a1", "q1", 0, "x"), result("a2", "q1", 0, "y")])])
    first = load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1")])])  # a1 now has no results
    assert first.tables["answers"] == TableLoadStats(fetched=1, inserted=1)
    assert first.tables["answer_results"] == TableLoadStats(deleted=1)
    with wh.connect(read_only=True) as conn:
        assert conn.execute(
            "SELECT active_lesson_id, deleted_at IS NULL FROM lms.answer_results ORDER BY rowid"
        ).fetchall() == [("a1", False), ("a2", True)]


def test_grandchildren_of_a_stale_row_stay_out_of_their_first_load(tmp_path: Path) -> None:
    """Three levels: the middle table's rows turn stale only when staleness is passed down after staging,
    so the grandchildren's first load must not go in directly either."""

    def columns(*names: str) -> list[pa.Field]:
        return [pa.field(name, pa.string(), nullable=False) for name in names]

    top = TableSpec(
        "top", pa.schema([*columns("id"), pa.field("at", pa.timestamp("us", "UTC"))]), ("id",), "incremental", "at"
    )
    middle = TableSpec("middle", pa.schema(columns("top_id", "id")), ("top_id", "id"), "incremental", parent="top")
    bottom = TableSpec(
        "bottom",
        pa.schema(columns("top_id", "middle_id", "id")),
        ("top_id", "middle_id", "id"),
        "incremental",
        parent="middle",
    )
    wh = make_warehouse(tmp_path)
    load_once(wh, "tree", [(top, [{"id": "t1", "at": T0 + timedelta(minutes=10)}])])
    late = load_once(
        wh,
        "tree",
        [
            (top, [{"id": "t1", "at": T0}]),
            (middle, [{"top_id": "t1", "id": "m1"}]),
            (bottom, [{"top_id": "t1", "middle_id": "m1", "id": "b1"}]),
        ],
    )
    assert (late.tables["top"].stale, late.tables["middle"].stale, late.tables["bottom"].stale) == (1, 1, 1)
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM lms.middle").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM lms.bottom").fetchone()[0] == 0
