"""Which active lessons an incremental answers run asks for, read from a real warehouse file: those whose
lastDate differs from the version whose answers the warehouse holds, and those with no version at all; and
the window spilled to Parquet gives the planner and the versions exactly what the query returns."""

from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.contract.tables import TABLES
from pipeline.raw.answer_versions import VERSIONS, spill_window_active_lessons, versions_of, window_query
from pipeline.raw.windows import Window
from pipeline.source.answers import plan_answer_requests
from pipeline.warehouse import Load, Warehouse

DAY = datetime(2026, 11, 20, tzinfo=UTC)
LATER = datetime(2026, 11, 21, tzinfo=UTC)


def test_refetch_marks_changed_and_never_fetched_active_lessons_even_without_a_last_date(wh: Warehouse):
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    with duckdb.connect(str(wh.path)) as conn:
        conn.executemany(
            "INSERT INTO lms.active_lessons (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
            [
                ("o", "held", "L", DAY),
                ("o", "moved", "L", LATER),
                ("o", "new", "L", DAY),
                ("o", "undated", "L", None),
                ("o", "undated-held", "L", None),
            ],
        )
        conn.executemany(
            f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
            [("o", "held", "L", DAY), ("o", "moved", "L", DAY), ("o", "undated-held", "L", None)],
        )

    with spill_window_active_lessons(
        wh, Window(since=None, until=None, moves_cursor=True, label="incremental"), only_changed=True
    ) as lessons:
        plan = lessons.planner_input()

    refetch = dict(zip(plan.column("user_id").to_pylist(), plan.column("refetch").to_pylist(), strict=True))
    assert refetch == {"held": False, "moved": True, "new": True, "undated": True, "undated-held": False}


def _many_active_lessons(wh: Warehouse) -> None:
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    with duckdb.connect(str(wh.path)) as conn:
        conn.execute(
            "INSERT INTO lms.active_lessons (owner_id, user_id, lesson_id, last_date) "
            "SELECT 'o' || (i % 3), 'u' || (i % 97), 'l' || (i % 61), "
            "TIMESTAMPTZ '2026-11-20 00:00:00+00' + to_minutes(i % 2880) FROM range(5000) t(i)"
        )
        conn.execute(
            f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) SELECT owner_id, user_id, lesson_id, last_date "
            "FROM lms.active_lessons WHERE user_id IN ('u1', 'u2')"
        )


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
    assert sorted((r.stream, r.path_values, r.covers) for r in ours.grouped) == sorted(
        (r.stream, r.path_values, r.covers) for r in theirs.grouped
    )
    assert sorted(ours.pairs.to_pylist(), key=str) == sorted(theirs.pairs.to_pylist(), key=str)
    expected = versions_of(in_memory.combine_chunks().to_batches()[0], window)
    assert 0 < expected.num_rows < in_memory.num_rows  # refetch and the window's end both filter
    assert sorted(versions.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
    assert counts == (in_memory.num_rows, sum(in_memory.column("refetch").to_pylist()))


def _window_rows(wh: Warehouse, window: Window, *, only_changed: bool, loading: Load | None = None) -> pa.Table:
    """Every column of the spilled window, read whole (the test's tables are small)."""
    with spill_window_active_lessons(wh, window, only_changed=only_changed, loading=loading) as lessons:
        return pq.read_table(lessons.path)


def _active_lessons(rows: list[tuple[str, datetime | None]]) -> pa.Table:
    """Active lessons of owner o on lesson L: (user_id, last_date), every other column null."""
    spec = TABLES["active_lessons"]
    values = {
        "owner_id": ["o"] * len(rows),
        "user_id": [user for user, _ in rows],
        "lesson_id": ["L"] * len(rows),
        "last_date": [last for _, last in rows],
    }
    return pa.table(
        {f.name: pa.array(values.get(f.name, [None] * len(rows)), type=f.type) for f in spec.schema}, schema=spec.schema
    )


def _rows(plan: pa.Table) -> list[tuple[object, ...]]:
    return sorted(zip(*(plan.column(name).to_pylist() for name in plan.column_names), strict=True))


def test_the_plan_made_from_an_uncommitted_load_is_the_plan_after_its_commit(wh: Warehouse):
    """The answers are planned from the active-lessons load before it commits (pipeline/raw/runner.py): the
    committed rows and the load's together, a key's newest lastDate winning (a key twice in the load: page
    drift), must give the plan the committed warehouse gives, in every window."""
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    spec = TABLES["active_lessons"]
    with wh.load(stream="active_lessons", run_id="before", started_at=DAY) as first:
        first.write(
            spec,
            _active_lessons(
                [("held", DAY), ("moved", DAY), ("old", DAY - timedelta(days=3)), ("back", DAY - timedelta(days=3))]
            ),
        )
        first.commit()
    with duckdb.connect(str(wh.path)) as conn:
        conn.executemany(
            f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
            [("o", "held", "L", DAY), ("o", "moved", "L", DAY)],
        )
    windows = [
        Window(since=None, until=None, moves_cursor=True, label="incremental"),
        Window(since=DAY - timedelta(days=1), until=None, moves_cursor=True, label="incremental"),
    ]

    with wh.load(stream="active_lessons", run_id="sweep", started_at=LATER) as load:
        # "back": before the window when committed, inside it now (the grouping filters each side by the window)
        load.write(spec, _active_lessons([("moved", LATER), ("new", DAY), ("twice", DAY), ("back", LATER)]))
        load.write(spec, _active_lessons([("twice", LATER)]))  # listed again on a later page, newer
        ahead = [
            _window_rows(wh, window, only_changed=changed, loading=load)
            for window in windows
            for changed in (True, False)
        ]
        load.commit()
    after = [_window_rows(wh, window, only_changed=changed) for window in windows for changed in (True, False)]

    assert [_rows(plan) for plan in ahead] == [_rows(plan) for plan in after]
    refetch = {row[1]: row[4] for row in _rows(after[0])}
    assert refetch == {"held": False, "moved": True, "new": True, "twice": True, "old": True, "back": True}
    assert {row[1]: row[3] for row in _rows(after[2])}["back"] == LATER
    assert {row[1]: row[3] for row in _rows(after[2])}["twice"] == LATER  # the newer listing counts
    assert "old" not in {row[1] for row in _rows(after[2])}  # before the window
