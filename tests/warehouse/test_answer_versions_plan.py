"""Which active lessons an incremental answers run asks for, read from a real warehouse file: those whose
lastDate differs from the version whose answers the warehouse holds, and those with no version at all; and
the window spilled to Parquet gives the planner and the versions exactly what the query returns."""

from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from pipeline.contract.tables import TABLES
from pipeline.defs.progress.answer_versions import (VERSIONS, spill_window_active_lessons, versions_of,
                                                    window_query)
from pipeline.source.answers import plan_answer_requests
from pipeline.warehouse import Warehouse
from pipeline.defs.windows import Window

DAY = datetime(2026, 11, 20, tzinfo=UTC)
LATER = datetime(2026, 11, 21, tzinfo=UTC)


def test_refetch_marks_changed_and_never_fetched_active_lessons_even_without_a_last_date(wh: Warehouse):
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    with duckdb.connect(str(wh.path)) as conn:
        conn.executemany("INSERT INTO lms.active_lessons (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
                         [("o", "held", "L", DAY), ("o", "moved", "L", LATER), ("o", "new", "L", DAY),
                          ("o", "undated", "L", None), ("o", "undated-held", "L", None)])
        conn.executemany(f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
                         [("o", "held", "L", DAY), ("o", "moved", "L", DAY), ("o", "undated-held", "L", None)])

    with spill_window_active_lessons(wh, Window(since=None, until=None, moves_cursor=True, label="incremental"),
                                     only_changed=True) as lessons:
        plan = lessons.planner_input()

    refetch = dict(zip(plan.column("user_id").to_pylist(), plan.column("refetch").to_pylist(), strict=True))
    assert refetch == {"held": False, "moved": True, "new": True, "undated": True, "undated-held": False}


def _many_active_lessons(wh: Warehouse) -> None:
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    with duckdb.connect(str(wh.path)) as conn:
        conn.execute("INSERT INTO lms.active_lessons (owner_id, user_id, lesson_id, last_date) "
                     "SELECT 'o' || (i % 3), 'u' || (i % 97), 'l' || (i % 61), "
                     "TIMESTAMPTZ '2026-11-20 00:00:00+00' + to_minutes(i % 2880) FROM range(5000) t(i)")
        conn.execute(f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) SELECT owner_id, user_id, lesson_id, last_date "
                     "FROM lms.active_lessons WHERE user_id IN ('u1', 'u2')")


def test_the_spilled_window_plans_and_records_exactly_what_the_query_returns(wh: Warehouse):
    _many_active_lessons(wh)
    window = Window(since=DAY, until=LATER, moves_cursor=True, label="incremental")
    query, params = window_query(window, only_changed=True)
    with duckdb.connect(str(wh.path), read_only=True) as conn:
        in_memory = conn.sql(query, params=params).to_arrow_table()

    with spill_window_active_lessons(wh, window, only_changed=True) as lessons:
        spilled = lessons.planner_input()
        versions = pa.Table.from_batches(list(lessons.fetched_versions()), schema=VERSIONS.schema)
        counts = lessons.counts()
        spill_file = lessons.path
        assert spill_file.exists()
    assert not spill_file.exists()  # removed with its block

    assert pa.types.is_dictionary(spilled.schema.field("user_id").type)
    ours, theirs = plan_answer_requests(spilled, 20), plan_answer_requests(in_memory, 20)
    assert sorted((r.stream, r.path_values, r.covers) for r in ours.grouped) == \
        sorted((r.stream, r.path_values, r.covers) for r in theirs.grouped)
    assert sorted(ours.pairs.to_pylist(), key=str) == sorted(theirs.pairs.to_pylist(), key=str)
    expected = versions_of(in_memory.combine_chunks().to_batches()[0], window)
    assert 0 < expected.num_rows < in_memory.num_rows  # refetch and the window's end both filter
    assert sorted(versions.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
    assert counts == (in_memory.num_rows, sum(in_memory.column("refetch").to_pylist()))
