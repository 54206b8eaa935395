"""Which active lessons an incremental answers run asks for, read from a real warehouse file: those whose
lastDate differs from the version whose answers the warehouse holds, and those with no version at all."""

from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow as pa

from pipeline.contract.tables import TABLES
from pipeline.defs.progress.answer_versions import VERSIONS, window_active_lessons
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

    plan = window_active_lessons(wh, Window(since=None, until=None, moves_cursor=True, label="incremental"),
                                 only_changed=True)

    refetch = dict(zip(plan.column("user_id").to_pylist(), plan.column("refetch").to_pylist(), strict=True))
    assert refetch == {"held": False, "moved": True, "new": True, "undated": True, "undated-held": False}


def _active_lessons(rows: list[tuple[str, datetime | None]]) -> pa.Table:
    """Active lessons of owner o on lesson L: (user_id, last_date), every other column null."""
    spec = TABLES["active_lessons"]
    values = {"owner_id": ["o"] * len(rows), "user_id": [user for user, _ in rows], "lesson_id": ["L"] * len(rows),
              "last_date": [last for _, last in rows]}
    return pa.table({f.name: pa.array(values.get(f.name, [None] * len(rows)), type=f.type) for f in spec.schema},
                    schema=spec.schema)


def _rows(plan: pa.Table) -> list[tuple[object, ...]]:
    return sorted(zip(*(plan.column(name).to_pylist() for name in plan.column_names), strict=True))


def test_the_plan_made_from_an_uncommitted_load_is_the_plan_after_its_commit(wh: Warehouse):
    """The answers are planned from the active-lessons load before it commits (answers_ahead.py): the
    committed rows and the load's together, a key's newest lastDate winning (a key twice in the load: page
    drift), must give the plan the committed warehouse gives, in every window."""
    wh.ensure_tables([*TABLES.values(), VERSIONS])
    spec = TABLES["active_lessons"]
    with wh.load(stream="active_lessons", run_id="before", started_at=DAY) as first:
        first.write(spec, _active_lessons([("held", DAY), ("moved", DAY), ("old", DAY - timedelta(days=3))]))
        first.commit()
    with duckdb.connect(str(wh.path)) as conn:
        conn.executemany(f"INSERT INTO lms.{VERSIONS.name} (owner_id, user_id, lesson_id, last_date) VALUES (?, ?, ?, ?)",
                         [("o", "held", "L", DAY), ("o", "moved", "L", DAY)])
    windows = [Window(since=None, until=None, moves_cursor=True, label="incremental"),
               Window(since=DAY - timedelta(days=1), until=None, moves_cursor=True, label="incremental")]

    with wh.load(stream="active_lessons", run_id="sweep", started_at=LATER) as load:
        load.write(spec, _active_lessons([("moved", LATER), ("new", DAY), ("twice", DAY)]))
        load.write(spec, _active_lessons([("twice", LATER)]))  # listed again on a later page, newer
        ahead = [window_active_lessons(wh, window, only_changed=changed, loading=load)
                 for window in windows for changed in (True, False)]
        load.commit()
    after = [window_active_lessons(wh, window, only_changed=changed) for window in windows for changed in (True, False)]

    assert [_rows(plan) for plan in ahead] == [_rows(plan) for plan in after]
    refetch = {row[1]: row[4] for row in _rows(after[0])}
    assert refetch == {"held": False, "moved": True, "new": True, "twice": True, "old": True}
    assert {row[1]: row[3] for row in _rows(after[2])}["twice"] == LATER  # the newer listing counts
    assert "old" not in {row[1] for row in _rows(after[2])}  # before the window
