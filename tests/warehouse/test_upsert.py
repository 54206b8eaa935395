"""Bulk upserts: insert/update/unchanged counts, load timestamps, dedupe inside a load, stale rows, a first
load without an index, and every strategy of bench/upsert_options.py giving the same table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from warehouse_helpers import ANSWERS, T0, answer, batch, dump, load_once, make_warehouse, rows

from bench.upsert_options import STRATEGIES
from bench.upsert_options import strategy as bench_strategy
from pipeline.warehouse import SchemaError, TableLoadStats, Warehouse
from pipeline.warehouse.merge import staging


def loaded_at(wh: Warehouse, seq: int):
    with wh.connect(read_only=True) as conn:
        return conn.execute("SELECT committed_at FROM lms._load_runs WHERE load_seq = ?", [seq]).fetchone()[0]


def test_counts_and_load_timestamps(wh: Warehouse) -> None:
    first = load_once(
        wh,
        "answers",
        [
            (
                ANSWERS,
                [
                    answer("a1", "q1"),
                    answer("a1", "q2", tags=["x"]),
                    answer("a2", "q1", validation='{"status": "pending"}'),
                ],
            )
        ],
    )
    assert first.tables["answers"] == TableLoadStats(fetched=3, inserted=3)
    second = load_once(
        wh,
        "answers",
        [
            (
                ANSWERS,
                [
                    answer("a1", "q1"),  # identical
                    answer("a1", "q2", tags=["x", "y"], minutes=5),  # list column changed
                    answer("a2", "q1", validation='{"status": "valid"}', minutes=5),  # JSON changed
                    answer("a3", "q1"),  # new
                ],
            )
        ],
    )
    assert second.tables["answers"] == TableLoadStats(fetched=4, inserted=1, updated=2, unchanged=1)
    t1, t2 = loaded_at(wh, 1), loaded_at(wh, 2)
    assert t1 < t2 and second.loaded_at == t2
    with wh.connect(read_only=True) as conn:
        got = rows(conn, "answers", "active_lesson_id, question_id, tags, validation, first_loaded_at, last_loaded_at")
    assert got == [
        ("a1", "q1", None, None, t1, t1),  # identical: not written
        ("a1", "q2", ["x", "y"], None, t1, t2),
        ("a2", "q1", None, '{"status": "valid"}', t1, t2),
        ("a3", "q1", None, None, t2, t2),
    ]


def test_dedupe_keeps_greatest_cursor_then_last_written(wh: Warehouse) -> None:
    with wh.load("answers", "run", T0) as load:
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a1", "q1", minutes=9, valid=True),
                    answer("a1", "q1", minutes=3, valid=False),  # older: loses
                    answer("a2", "q1", minutes=1, valid=False),
                ],
            ),
        )
        load.write(
            ANSWERS,
            batch(
                ANSWERS,
                [
                    answer("a2", "q1", minutes=1, valid=True),  # tie: last written wins
                    answer("a2", "q1", minutes=1, valid=None),
                ],
            ),
        )
        result = load.commit()
    assert result.tables["answers"] == TableLoadStats(fetched=5, inserted=2)
    with wh.connect(read_only=True) as conn:
        assert rows(conn, "answers", "active_lesson_id, is_valid, last_date") == [
            ("a1", True, T0 + timedelta(minutes=9)),
            ("a2", None, T0 + timedelta(minutes=1)),
        ]


def test_a_row_older_than_the_warehouse_copy_is_not_applied(wh: Warehouse) -> None:
    load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1", minutes=10, valid=True)])])
    late = load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1", minutes=2, valid=False)])])
    assert late.tables["answers"] == TableLoadStats(fetched=1, stale=1)
    with wh.connect(read_only=True) as conn:
        assert rows(conn, "answers", "is_valid, last_loaded_at") == [(True, loaded_at(wh, 1))]


def test_first_load_keeps_the_comment_and_declares_no_index(wh: Warehouse) -> None:
    load_once(wh, "answers", [(ANSWERS, [answer(f"a{i:02d}", "q1") for i in reversed(range(50))])])
    with wh.connect() as conn:
        assert conn.execute("SELECT count(DISTINCT active_lesson_id) FROM lms.answers").fetchone()[0] == 50
        assert conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'answers'").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM duckdb_indexes() WHERE schema_name = 'lms'").fetchone()[0] == 0
        assert not conn.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'answers' "
            "AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        ).fetchone()[0]


def test_a_value_that_does_not_fit_names_the_table(wh: Warehouse) -> None:
    with pytest.raises(SchemaError, match=r"table answers: a value of this load does not fit .*Malformed JSON"):
        load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1", validation="{not json")])])
    assert wh.cursor("answers") is None


def scenario(root: Path, strategy: str) -> dict[str, list]:
    """A sequence of loads touching every change class; the same clock gives the same timestamps."""
    wh = make_warehouse(root, upsert=bench_strategy(strategy))
    load_once(
        wh, "answers", [(ANSWERS, [answer(f"a{i}", "q1", tags=["t"] if i % 2 else None) for i in range(20)])], cursor=T0
    )
    load_once(
        wh,
        "answers",
        [
            (
                ANSWERS,
                [
                    *(
                        answer(f"a{i}", "q1", minutes=1, tags=["t", "u"]) for i in range(0, 20, 3)
                    ),  # list changes (rewrite)
                    *(
                        answer(f"a{i}", "q1", minutes=1, valid=False, tags=["t"] if i % 2 else None)
                        for i in range(1, 20, 3)
                    ),
                    *(answer(f"a{i}", "q1", tags=["t"] if i % 2 else None) for i in range(2, 20, 3)),  # unchanged
                    *(answer(f"n{i}", "q1") for i in range(5)),  # new
                ],
            )
        ],
        cursor=T0 + timedelta(hours=1),
    )
    load_once(wh, "answers", [(ANSWERS, [answer("a3", "q1", minutes=-5, valid=None)])])  # stale
    with wh.connect() as conn:  # a column the spec no longer carries must survive every strategy
        conn.execute("ALTER TABLE lms.answers ADD COLUMN legacy VARCHAR")
        conn.execute("UPDATE lms.answers SET legacy = 'keep-' || active_lesson_id")
    load_once(wh, "answers", [(ANSWERS, [answer("a0", "q1", minutes=2, tags=["v"]), answer("a1", "q1", minutes=2)])])
    tables = dump(wh, ("answers", "_sync_state", "_load_runs"))
    tables["_load_runs"] = [r[:1] + r[2:] for r in tables["_load_runs"]]  # load ids carry a random token
    return tables


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    return scenario(tmp_path_factory.mktemp("product"), "product")


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "product"])
def test_every_strategy_gives_the_same_tables(tmp_path: Path, strategy: str, reference: dict[str, list]) -> None:
    assert scenario(tmp_path / strategy, strategy) == reference
    legacy = {r[0]: r[-1] for r in reference["answers"]}  # rows are (active_lesson_id, ..., legacy)
    assert legacy["a0"] == "keep-a0" and legacy["a1"] == "keep-a1"
    assert len(reference["answers"]) == 25


def test_a_small_incremental_load_staged_by_row_id_gives_the_same_tables(
    tmp_path: Path, reference: dict[str, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two-phase staging of a few rows of a big table (staging.FEW_OF_MANY), taken here by every incremental
    load into a table with rows, classifies every change (rewrite, update, same, insert, stale, a column carried
    over) as the one-phase staging that built the reference."""
    phases: list[bool] = []
    one_phase_or_two = staging._matched_sql

    def recorded(stage: staging.Stage, *, by_row_id: bool, within: staging.Slice = staging.WHOLE_RANGE) -> str:
        phases.append(by_row_id)
        return one_phase_or_two(stage, by_row_id=by_row_id, within=within)

    monkeypatch.setattr(staging, "FEW_OF_MANY", 1e9)
    monkeypatch.setattr(staging, "_matched_sql", recorded)
    assert scenario(tmp_path, "product") == reference
    assert phases == [True, True, True]  # the three loads after the first; the first load has no stage


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of product, update_insert"):
        bench_strategy("fastest")
