"""Which active lessons an incremental answers run asks for, read from a real warehouse file: those whose
lastDate differs from the version whose answers the warehouse holds, and those with no version at all."""

from datetime import UTC, datetime

import duckdb

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
