"""The SQL helpers behind the asset checks pass on good data and count planted bad data exactly."""

from __future__ import annotations

import pytest
from warehouse_helpers import ACTIVE_LESSONS, ANSWERS, GROUPS, T0, answer, load_once

from pipeline.warehouse import SchemaError, Warehouse, duplicate_keys, null_keys, orphans, row_count
from pipeline.warehouse.checks import enforced_by_primary_key, last_load_time


def test_checks_pass_on_good_data_and_count_planted_problems(seeded: Warehouse) -> None:
    load_once(seeded, "active_lessons", [(ACTIVE_LESSONS, [
        {"user_id": "u1", "lesson_id": "l1", "score": 1.0, "last_date": T0}])])
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u1")])])
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}, {"id": "g2"}])], complete_snapshots={"groups"})
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}])], complete_snapshots={"groups"})
    with seeded.connect() as conn:
        assert duplicate_keys(conn, "answers") == 0
        assert null_keys(conn, "answers") == 0
        assert orphans(conn, "answers", "active_lessons", ["user_id", "lesson_id"]) == 0
        assert row_count(conn, "answers") == 2
        assert row_count(conn, "groups") == 1  # g2 is marked deleted
        # plant bad data the way a broken writer would: into an index-less copy of the table
        conn.execute("CREATE TABLE lms.answers_copy AS SELECT * FROM lms.answers")
        conn.execute("INSERT INTO lms.answers_copy SELECT * FROM lms.answers WHERE active_lesson_id = 'a1'")
        conn.execute("INSERT INTO lms.answers_copy (active_lesson_id, question_id, attempt_index, user_id, lesson_id) "
                     "VALUES (NULL, 'q9', 0, 'u2', 'l1'), ('a7', 'q1', 0, 'u9', 'l1')")
        key = ("active_lesson_id", "question_id", "attempt_index")
        assert duplicate_keys(conn, "answers_copy", key) == 1
        assert null_keys(conn, "answers_copy", key) == 1
        assert orphans(conn, "answers_copy", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}) == 2
        assert row_count(conn, "answers_copy") == 5
        with pytest.raises(SchemaError, match="has no primary key; pass the key columns"):
            duplicate_keys(conn, "answers_copy")
        with pytest.raises(SchemaError, match="lms.nope does not exist"):
            row_count(conn, "nope")


def test_key_checks_trust_a_declared_primary_key_and_link_checks_can_look_at_one_load(seeded: Warehouse) -> None:
    load_once(seeded, "active_lessons", [(ACTIVE_LESSONS, [
        {"user_id": "u1", "lesson_id": "l1", "score": 1.0, "last_date": T0}])])
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u8")])])
    with seeded.connect(read_only=True) as conn:
        first = last_load_time(conn, "answers")
    load_once(seeded, "answers", [(ANSWERS, [answer("a3", "q1", user="u9")])])
    with seeded.connect() as conn:
        assert enforced_by_primary_key(conn, "answers")
        assert duplicate_keys(conn, "answers", trust_primary_key=False) == 0
        assert null_keys(conn, "answers", trust_primary_key=False) == 0
        since = last_load_time(conn, "answers")
        assert since > first
        on = ["user_id", "lesson_id"]
        assert orphans(conn, "answers", "active_lessons", on) == 2  # u8 (first load) and u9 (second)
        assert orphans(conn, "answers", "active_lessons", on, touched_since=since) == 1  # what the last load wrote
        assert orphans(conn, "answers", "active_lessons", on, touched_since=first) == 2
        assert last_load_time(conn, "groups") is None  # never loaded
