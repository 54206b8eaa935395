"""Rows that vanish are marked, never dropped: complete snapshots, and children of reloaded parents."""

from __future__ import annotations

from datetime import timedelta

import pytest
from warehouse_helpers import (
    ANSWER_RESULTS,
    ANSWERS,
    GROUPS,
    REGISTRATIONS,
    SESSIONS,
    T0,
    answer,
    batch,
    load_once,
    result,
    rows,
)

from pipeline.warehouse import ChildOf, SchemaError, TableLoadStats, Warehouse, row_count


def group(gid: str, title: str = "G", disabled: bool = False) -> dict:
    return {"id": gid, "title": title, "disabled": disabled}


def deleted(wh: Warehouse, table: str, columns: str) -> list[tuple]:
    with wh.connect(read_only=True) as conn:
        return rows(conn, table, f"{columns}, deleted_at IS NOT NULL AS deleted")


def test_complete_snapshot_marks_vanished_rows_and_revives_returning_ones(seeded: Warehouse) -> None:
    load_once(seeded, "groups", [(GROUPS, [group("g1"), group("g2"), group("g3")])], complete_snapshots={"groups"})
    second = load_once(
        seeded, "groups", [(GROUPS, [group("g1"), group("g3", "renamed")])], complete_snapshots={"groups"}
    )
    assert second.tables["groups"] == TableLoadStats(fetched=2, updated=1, unchanged=1, deleted=1)
    assert deleted(seeded, "groups", "id, title") == [("g1", "G", False), ("g2", "G", True), ("g3", "renamed", False)]
    with seeded.connect(read_only=True) as conn:
        stamp = conn.execute("SELECT deleted_at FROM lms.groups WHERE id = 'g2'").fetchone()[0]
        assert stamp == second.loaded_at
        assert row_count(conn, "groups") == 2
    third = load_once(
        seeded, "groups", [(GROUPS, [group("g1"), group("g2"), group("g3", "renamed")])], complete_snapshots={"groups"}
    )
    assert third.tables["groups"] == TableLoadStats(fetched=3, updated=1, unchanged=2)  # g2 came back
    assert deleted(seeded, "groups", "id") == [("g1", False), ("g2", False), ("g3", False)]


def test_snapshot_not_declared_complete_deletes_nothing(seeded: Warehouse) -> None:
    load_once(seeded, "groups", [(GROUPS, [group("g1"), group("g2")])], complete_snapshots={"groups"})
    partial = load_once(seeded, "groups", [(GROUPS, [group("g1")])])
    assert partial.tables["groups"].deleted == 0
    assert deleted(seeded, "groups", "id") == [("g1", False), ("g2", False)]


def test_an_empty_complete_snapshot_deletes_every_row(seeded: Warehouse) -> None:
    load_once(seeded, "groups", [(GROUPS, [group("g1"), group("g2")])], complete_snapshots={"groups"})
    emptied = load_once(seeded, "groups", [(GROUPS, [])], complete_snapshots={"groups"})
    assert emptied.tables["groups"] == TableLoadStats(deleted=2)
    assert deleted(seeded, "groups", "id") == [("g1", True), ("g2", True)]


def test_complete_snapshot_of_an_unknown_table_is_refused(wh: Warehouse) -> None:
    with pytest.raises(SchemaError, match="complete_snapshots names table 'grups'"):
        load_once(wh, "groups", [(GROUPS, [group("g1")])], complete_snapshots={"grups"})
    assert wh.cursor("groups") is None


def test_children_of_a_reloaded_parent_are_replaced(seeded: Warehouse) -> None:
    load_once(
        seeded,
        "answers",
        [
            (ANSWERS, [answer("a1", "q1"), answer("a2", "q1")]),
            (
                ANSWER_RESULTS,
                [
                    result("a1", "q1", 0, "x"),
                    result("a1", "q1", 1, "y"),
                    result("a1", "q1", 2, "z"),
                    result("a2", "q1", 0, "w"),
                ],
            ),
        ],
    )
    shrunk = load_once(
        seeded, "answers", [(ANSWERS, [answer("a1", "q1", minutes=1)]), (ANSWER_RESULTS, [result("a1", "q1", 0, "x2")])]
    )
    assert shrunk.tables["answer_results"] == TableLoadStats(fetched=1, updated=1, deleted=2)
    assert deleted(seeded, "answer_results", "active_lesson_id, result_index, value") == [
        ("a1", 0, "x2", False),
        ("a1", 1, "y", True),
        ("a1", 2, "z", True),
        ("a2", 0, "w", False),
    ]  # a2 was not reloaded: its results stay
    # The parent comes back with no results at all and the load writes no answer_results batch:
    # the registered child table is still replaced (its old rows of a1 are deleted).
    emptied = load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", minutes=2)])])
    assert emptied.tables["answer_results"] == TableLoadStats(deleted=1)
    assert deleted(seeded, "answer_results", "active_lesson_id, result_index") == [
        ("a1", 0, True),
        ("a1", 1, True),
        ("a1", 2, True),
        ("a2", 0, False),
    ]
    revived = load_once(
        seeded, "answers", [(ANSWERS, [answer("a1", "q1", minutes=3)]), (ANSWER_RESULTS, [result("a1", "q1", 1, "y")])]
    )
    assert revived.tables["answer_results"] == TableLoadStats(fetched=1, updated=1)
    assert deleted(seeded, "answer_results", "active_lesson_id, result_index")[1] == ("a1", 1, False)


def test_children_link_by_leading_key_columns_when_names_differ(seeded: Warehouse) -> None:
    def session(sid: str) -> dict:
        return {"id": sid, "title": sid, "presenters": ["p"], "start_date": T0}

    def registration(sid: str, user: str) -> dict:
        return {"session_id": sid, "user_id": user, "status": "approved"}

    load_once(
        seeded,
        "lesson_sessions",
        [
            (SESSIONS, [session("s1"), session("s2")]),
            (REGISTRATIONS, [registration("s1", "u1"), registration("s1", "u2"), registration("s2", "u1")]),
        ],
    )
    load_once(seeded, "lesson_sessions", [(SESSIONS, [session("s1")]), (REGISTRATIONS, [registration("s1", "u2")])])
    assert deleted(seeded, "lesson_session_registrations", "session_id, user_id") == [
        ("s1", "u1", True),
        ("s1", "u2", False),
        ("s2", "u1", False),
    ]


def test_children_of_a_stale_parent_are_left_alone(seeded: Warehouse) -> None:
    load_once(
        seeded,
        "answers",
        [
            (ANSWERS, [answer("a1", "q1", minutes=10)]),
            (ANSWER_RESULTS, [result("a1", "q1", 0, "new"), result("a1", "q1", 1, "new")]),
        ],
    )
    late = load_once(
        seeded,
        "answers",
        [(ANSWERS, [answer("a1", "q1", minutes=1)]), (ANSWER_RESULTS, [result("a1", "q1", 0, "old")])],
    )
    assert late.tables["answers"].stale == 1
    assert late.tables["answer_results"] == TableLoadStats(fetched=1, stale=1)
    assert deleted(seeded, "answer_results", "result_index, value") == [(0, "new", False), (1, "new", False)]


def test_replacement_can_be_switched_off_or_linked_explicitly(seeded: Warehouse) -> None:
    load_once(
        seeded,
        "answers",
        [(ANSWERS, [answer("a1", "q1")]), (ANSWER_RESULTS, [result("a1", "q1", 0, "x"), result("a1", "q1", 1, "y")])],
    )
    kept = load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", minutes=1)])], replace_children_of={})
    assert "answer_results" not in kept.tables
    on = {k: k for k in ("active_lesson_id", "question_id", "attempt_index")}
    replaced = load_once(
        seeded,
        "answers",
        [(ANSWERS, [answer("a1", "q1", minutes=2)])],
        replace_children_of={"answer_results": ChildOf("answers", on)},
    )
    assert replaced.tables["answer_results"].deleted == 2
    with pytest.raises(SchemaError, match=r"must cover the parent's key"):
        load_once(
            seeded,
            "answers",
            [(ANSWERS, [answer("a1", "q1", minutes=3)])],
            replace_children_of={"answer_results": ChildOf("answers", {"active_lesson_id": "active_lesson_id"})},
        )
    with pytest.raises(SchemaError, match=r"pairs DOUBLE with VARCHAR"):
        load_once(
            seeded,
            "answers",
            [(ANSWERS, [answer("a1", "q1", minutes=3)])],
            replace_children_of={
                "answer_results": ChildOf(
                    "answers",
                    {
                        "active_lesson_id": "active_lesson_id",
                        "attempt_index": "question_id",
                        "question_id": "attempt_index",
                    },
                )
            },
        )


def test_only_tables_that_keep_deleted_rows_can_be_complete_snapshots(seeded: Warehouse) -> None:
    with pytest.raises(SchemaError, match="answers has no deleted_at column"):
        load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])], complete_snapshots={"answers"})
    with seeded.load("groups", "run", T0 + timedelta(days=1)) as load:
        load.write(GROUPS, batch(GROUPS, [group("g9")]))
        load.abort()
    assert deleted(seeded, "groups", "id") == []
