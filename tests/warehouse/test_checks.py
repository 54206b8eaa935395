"""The SQL helpers behind the asset checks pass on good data and count planted bad data exactly."""

from __future__ import annotations

import duckdb
import pytest
from warehouse_helpers import ACTIVE_LESSONS, ANSWERS, GROUPS, T0, answer, load_once

from pipeline.warehouse import SchemaError, Warehouse, duplicate_keys, null_keys, orphans, row_count
from pipeline.warehouse.merge import checks, state
from pipeline.warehouse.merge.checks import last_load_counts, last_load_time


def test_checks_pass_on_good_data_and_count_planted_problems(seeded: Warehouse) -> None:
    load_once(
        seeded,
        "active_lessons",
        [(ACTIVE_LESSONS, [{"user_id": "u1", "lesson_id": "l1", "score": 1.0, "last_date": T0}])],
    )
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u1")])])
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}, {"id": "g2"}])], complete_snapshots={"groups"})
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}])], complete_snapshots={"groups"})
    with seeded.connect() as conn:
        assert duplicate_keys(conn, "answers") == 0
        assert null_keys(conn, "answers") == 0
        assert orphans(conn, "answers", "active_lessons", ["user_id", "lesson_id"]) == 0
        assert row_count(conn, "answers") == 2
        assert row_count(conn, "groups") == 1  # g2 is marked deleted
        # plant bad data the way a broken writer would: a duplicate straight into the table (no index refuses it),
        # and a NULL key into an unregistered copy without NOT NULL columns
        conn.execute("INSERT INTO lms.answers SELECT * FROM lms.answers WHERE active_lesson_id = 'a2'")
        assert duplicate_keys(conn, "answers") == 1
        conn.execute(
            "DELETE FROM lms.answers WHERE active_lesson_id = 'a2' AND rowid = (SELECT max(rowid) FROM lms.answers)"
        )
        assert duplicate_keys(conn, "answers") == 0
        conn.execute("CREATE TABLE lms.answers_copy AS SELECT * FROM lms.answers")
        conn.execute("INSERT INTO lms.answers_copy SELECT * FROM lms.answers WHERE active_lesson_id = 'a1'")
        conn.execute(
            "INSERT INTO lms.answers_copy (active_lesson_id, question_id, attempt_index, user_id, lesson_id) "
            "VALUES (NULL, 'q9', 0, 'u2', 'l1'), ('a7', 'q1', 0, 'u9', 'l1')"
        )
        key = ("active_lesson_id", "question_id", "attempt_index")
        assert duplicate_keys(conn, "answers_copy", key) == 1
        assert null_keys(conn, "answers_copy", key) == 1
        assert orphans(conn, "answers_copy", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}) == 2
        assert row_count(conn, "answers_copy") == 5
        with pytest.raises(SchemaError, match="has no key; pass the key columns"):
            duplicate_keys(conn, "answers_copy")
        with pytest.raises(SchemaError, match="lms.nope does not exist"):
            row_count(conn, "nope")


def test_key_and_link_checks_can_look_at_one_load(seeded: Warehouse) -> None:
    load_once(
        seeded,
        "active_lessons",
        [(ACTIVE_LESSONS, [{"user_id": "u1", "lesson_id": "l1", "score": 1.0, "last_date": T0}])],
    )
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u8")])])
    with seeded.connect(read_only=True) as conn:
        first = last_load_time(conn, "answers")
    load_once(seeded, "answers", [(ANSWERS, [answer("a3", "q1", user="u9")])])
    with seeded.connect() as conn:
        assert duplicate_keys(conn, "answers") == 0
        assert null_keys(conn, "answers") == 0
        since = last_load_time(conn, "answers")
        assert since > first
        # a duplicate of a row of the first load, written with the last load's time: only the scope that
        # covers the writing load sees it; a planted copy carrying an old load time is found by the full check
        conn.execute(
            "INSERT INTO lms.answers SELECT * REPLACE (CAST($t AS TIMESTAMPTZ) AS last_loaded_at) "
            "FROM lms.answers WHERE active_lesson_id = 'a1'",
            {"t": since},
        )
        assert duplicate_keys(conn, "answers", touched_since=since) == 1
        assert duplicate_keys(conn, "answers", touched_since=since, max_touched=1) == 1  # too many: every row
        conn.execute("UPDATE lms.answers SET last_loaded_at = $t WHERE active_lesson_id = 'a1'", {"t": first})
        assert duplicate_keys(conn, "answers", touched_since=since) == 0
        assert duplicate_keys(conn, "answers") == 1
        conn.execute(
            "DELETE FROM lms.answers WHERE active_lesson_id = 'a1' AND rowid = (SELECT max(rowid) FROM lms.answers)"
        )
        on = ["user_id", "lesson_id"]
        assert orphans(conn, "answers", "active_lessons", on) == 2  # u8 (first load) and u9 (second)
        assert orphans(conn, "answers", "active_lessons", on, touched_since=since) == 1  # what the last load wrote
        assert orphans(conn, "answers", "active_lessons", on, touched_since=first) == 2
        assert last_load_time(conn, "groups") is None  # never loaded


@pytest.mark.parametrize("few_children", [0, 4, 10**9], ids=["always NOT EXISTS", "by size", "always LEFT JOIN"])
def test_link_checks_in_ranges_count_exactly_what_one_join_counts(
    seeded: Warehouse, few_children: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both sides bigger than chunk_rows: the join runs range by range of the first linked column; planted
    orphans at the edges, inside, beyond both ends and with a NULL first column are all counted once, whichever
    side of the join is hashed (checks.FEW_CHILDREN: by the children's count, or forced either way)."""
    monkeypatch.setattr(checks, "FEW_CHILDREN", few_children)
    with seeded.connect() as conn:
        conn.execute("CREATE TABLE lms.parents (a VARCHAR, b BIGINT, deleted_at TIMESTAMPTZ)")
        conn.execute("CREATE TABLE lms.kids (a VARCHAR, b BIGINT, k BIGINT, last_loaded_at TIMESTAMPTZ)")
        conn.execute("INSERT INTO lms.parents SELECT printf('p%05d', i // 3), i % 3, NULL FROM range(6000) t(i)")
        conn.execute("INSERT INTO lms.parents VALUES ('p00010', 7, TIMESTAMPTZ '2026-01-01')")  # deleted parent
        conn.execute(
            "INSERT INTO lms.kids SELECT a, b, k, TIMESTAMPTZ '2026-01-01' FROM lms.parents, range(2) r(k) "
            "WHERE deleted_at IS NULL"
        )
        conn.execute(
            "INSERT INTO lms.kids VALUES ('p00000', 5, 0, NULL), ('p01999', 9, 0, NULL), "
            "('a', 0, 0, NULL), ('z', 0, 0, NULL), (NULL, 0, 0, NULL), ('p00010', 7, 0, NULL), "
            "('p00500', NULL, 0, NULL)"
        )
        on = ["a", "b"]
        whole = orphans(conn, "kids", "parents", on, chunk_rows=10**9)
        assert whole == 7
        for chunk_rows in (5000, 1000, 100):  # 3, 7 and 121 ranges
            assert orphans(conn, "kids", "parents", on, chunk_rows=chunk_rows) == whole
        # scoped to the rows a load wrote (the parent keeps no deleted rows): the old rows are not looked at
        conn.execute("CREATE TABLE lms.live_parents AS SELECT a, b FROM lms.parents WHERE deleted_at IS NULL")
        conn.execute(
            "UPDATE lms.kids SET last_loaded_at = TIMESTAMPTZ '2026-02-01' WHERE a IN ('z', 'p00010') "
            "OR (a, b) = ('p00002', 1)"
        )
        since = T0.replace(year=2026, month=2, day=1, hour=0)
        for chunk_rows in (10**9, 1000, 100):
            assert orphans(conn, "kids", "live_parents", on, chunk_rows=chunk_rows) == 7
            assert orphans(conn, "kids", "live_parents", on, touched_since=since, chunk_rows=chunk_rows) == 2


def test_key_checks_count_every_duplicated_key_once(seeded: Warehouse) -> None:
    """Every row grouped at once (by a hash of the key, then the colliding keys themselves): duplicates at both
    ends of the key's order, a key held three times, and NULLs in the key are each counted once."""
    with seeded.connect() as conn:
        conn.execute("CREATE TABLE lms.pairs (a VARCHAR, b BIGINT, last_loaded_at TIMESTAMPTZ)")
        conn.execute(
            "INSERT INTO lms.pairs SELECT printf('p%05d', i // 3), i % 3, TIMESTAMPTZ '2026-01-01' "
            "FROM range(6000) t(i)"
        )
        conn.execute(
            "INSERT INTO lms.pairs VALUES ('p00000', 0, NULL), ('p01999', 2, NULL), ('p01000', 1, NULL), "
            "('p01000', 1, NULL), ('a', 0, NULL), ('a', 0, NULL), (NULL, 0, NULL), (NULL, 0, NULL), "
            "(NULL, 1, NULL)"
        )
        key = ("a", "b")
        assert duplicate_keys(conn, "pairs", key) == 5  # p00000/0, p01999/2, p01000/1 (three rows), a/0, NULL/0


@pytest.mark.parametrize("per_read", [64, 1])  # 1: every load its own read, the paging itself is exercised
def test_last_load_counts_are_each_tables_newest_load(
    seeded: Warehouse, per_read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADS_PER_READ", per_read)
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}, {"id": "g2"}])], complete_snapshots={"groups"})
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u1")])])
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}])], complete_snapshots={"groups"})
    load_once(seeded, "answers", [(ANSWERS, [answer("a3", "q1", user="u1")])])
    with seeded.connect(read_only=True) as conn:
        found = last_load_counts(conn, ["groups", "answers", "users"])
    assert set(found) == {"groups", "answers"}  # no load wrote users
    assert (found["groups"]["inserted"], found["groups"]["deleted"]) == (0, 1)  # the second groups load, not the first
    assert (found["answers"]["inserted"], found["answers"]["deleted"]) == (1, 0)


def test_a_load_that_wrote_most_of_the_table_has_every_row_checked(seeded: Warehouse) -> None:
    """A first load touched (nearly) every row: its key check groups the whole table (cheaper than matching the
    touched keys against it), so it also finds a duplicate among rows no load of it wrote."""
    load_once(
        seeded,
        "answers",
        [(ANSWERS, [answer("a1", "q1", user="u1"), answer("a2", "q1", user="u1"), answer("a3", "q1", user="u1")])],
    )
    with seeded.connect() as conn:
        since = last_load_time(conn, "answers")
        older = (
            "INSERT INTO lms.answers SELECT * REPLACE (CAST($t AS TIMESTAMPTZ) AS last_loaded_at, {id} AS "
            "active_lesson_id) FROM lms.answers WHERE last_loaded_at >= $since {which}"
        )
        conn.execute(older.format(id="'old'", which="AND active_lesson_id IN ('a1', 'a1')"), {"t": T0, "since": since})
        conn.execute(older.format(id="'old'", which="AND active_lesson_id = 'a1'"), {"t": T0, "since": since})
        assert duplicate_keys(conn, "answers", touched_since=since) == 1  # 3 of 5 rows touched: every row
        conn.execute(older.format(id="'z' || active_lesson_id", which=""), {"t": T0, "since": since})
        assert duplicate_keys(conn, "answers", touched_since=since) == 0  # 3 of 8: the touched keys only
        assert duplicate_keys(conn, "answers") == 1


def test_repeats_any_answers_within_a_small_memory_limit(tmp_path) -> None:
    from pipeline.warehouse.duck.connection import repeats_any

    conn = duckdb.connect(str(tmp_path / "w.duckdb"))
    conn.execute(f"SET memory_limit = '48MiB'; SET threads = 2; SET temp_directory = '{tmp_path / 'tmp'}'")
    conn.execute("CREATE TABLE t AS SELECT range AS k FROM range(6000000)")
    assert repeats_any(conn, "hash(k)", "t") is False
    conn.execute("INSERT INTO t VALUES (42)")
    assert repeats_any(conn, "hash(k)", "t") is True


def test_a_tables_checks_run_again_only_when_its_run_changed_it_or_its_parent_or_met_a_new_field(
    seeded: Warehouse,
) -> None:
    """raw_check_results: a table the run loaded without changing a row of it or of its parent, and without
    anything new in its contract, yields only its blocking key check (passed, no query); a change to the table,
    to its parent, or news in its contract brings every check back."""
    from pipeline.contract.streams import Link
    from pipeline.defs.raw.checks import CheckRules, raw_check_results

    rules = CheckRules((Link("answers", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}),), 0.5)
    every_check = {"answers": {"key_unique_not_null", "links_to_active_lessons", "not_shrinking", "contract_unchanged"}}
    lesson = {"user_id": "u1", "lesson_id": "l1", "score": 1.0, "last_date": T0}
    load_once(seeded, "active_lessons", [(ACTIVE_LESSONS, [lesson])], run_id="first")
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1")])], run_id="first")

    def evaluated(run_id: str, contract: dict[str, object] | None = None) -> dict[str, object]:
        with seeded.connect(read_only=True) as conn:
            results = raw_check_results(conn, ["answers"], every_check, rules, run_id, {"answers": contract or {}})
            return {r.check_name: r.metadata["checked"].value if "checked" in r.metadata else None for r in results}

    assert set(evaluated("first")) == every_check["answers"]  # the run that inserted the rows
    # the same rows again: seen, not changed
    load_once(seeded, "active_lessons", [(ACTIVE_LESSONS, [lesson])], run_id="same")
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1")])], run_id="same")
    assert evaluated("same") == {"key_unique_not_null": "no row changed by this run"}
    assert set(evaluated("same", {"new_fields": 1})) == every_check["answers"]  # the contract moved
    assert set(evaluated("same", {"quarantined": 2})) == every_check["answers"]
    # the parent changed, the answers did not: the link (and every other check) is looked at again
    load_once(seeded, "active_lessons", [(ACTIVE_LESSONS, [{**lesson, "score": 2.0}])], run_id="parent")
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", user="u1")])], run_id="parent")
    assert "links_to_active_lessons" in evaluated("parent")
    # a run that did not load the table (the check_warehouse job) checks every row
    with seeded.connect(read_only=True) as conn:
        results = list(raw_check_results(conn, ["answers"], every_check, rules, "none", {}))
    assert {r.check_name for r in results} == every_check["answers"]
