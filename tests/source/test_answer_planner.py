"""Answer request planning: every changed pair covered, grouped requests when cheaper, Arrow only."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.source.answers import PAIR_COST, plan_answer_requests


def covered(plan, pairs):
    lessons = {dict(r.path_values)["lesson_id"] for r in plan.grouped if r.stream == "answers_by_lesson"}
    users = {dict(r.path_values)["user_id"] for r in plan.grouped if r.stream == "answers_by_user"}
    singles = set(
        zip(plan.pairs.column("user_id").to_pylist(), plan.pairs.column("lesson_id").to_pylist(), strict=True)
    )
    return all(lesson in lessons or user in users or (user, lesson) in singles for user, lesson in pairs)


def test_one_lesson_many_users_is_one_lesson_request():
    pairs = [(f"u{i}", "L") for i in range(50)]
    plan = plan_answer_requests(pa.table({"user_id": [u for u, _ in pairs], "lesson_id": ["L"] * 50}), 20)
    assert [(r.stream, r.path_values, r.covers) for r in plan.grouped] == [
        ("answers_by_lesson", (("lesson_id", "L"),), 50)
    ]
    assert plan.pairs.num_rows == 0
    assert plan.estimated_cost(20) == 4  # 3 pages + confirm


def test_scattered_pairs_stay_pair_requests_and_duplicates_collapse():
    table = pa.table({"user_id": ["a", "b", "a"], "lesson_id": ["1", "2", "1"]})
    plan = plan_answer_requests(table, 100)
    assert plan.grouped == []
    assert sorted(plan.pairs.to_pylist(), key=str) == [
        {"user_id": "a", "lesson_id": "1"},
        {"user_id": "b", "lesson_id": "2"},
    ]
    assert [r.covers for r in plan.requests()] == [1, 1]
    assert plan.estimated_cost(100) == 2 * PAIR_COST


def test_mixed_plan_covers_everything_and_beats_pairs():
    users = [f"u{i % 37}" for i in range(600)]
    lessons = [f"l{(i * 7) % 23}" for i in range(600)]
    pairs = list(zip(users, lessons, strict=True))
    plan = plan_answer_requests(pa.table({"user_id": users, "lesson_id": lessons}), 10)
    assert covered(plan, pairs)
    assert plan.estimated_cost(10) < PAIR_COST * len(set(pairs))


def test_user_request_when_one_user_changed_many_lessons():
    table = pa.table({"user_id": ["u"] * 5 + ["v"], "lesson_id": ["1", "2", "3", "4", "5", "9"]})
    plan = plan_answer_requests(table, 100)
    assert [(r.stream, r.covers) for r in plan.grouped] == [("answers_by_user", 5)]
    assert plan.pairs.to_pylist() == [{"user_id": "v", "lesson_id": "9"}]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="lesson_id"):
        plan_answer_requests(pa.table({"user_id": ["u"]}), 10)
    with pytest.raises(ValueError, match="null"):
        plan_answer_requests(pa.table({"user_id": ["u", None], "lesson_id": ["l", "m"]}), 10)


def test_only_refetch_pairs_are_covered_but_every_pair_counts_in_request_costs():
    users = [f"u{i}" for i in range(50)]
    one_changed = pa.table({"user_id": users, "lesson_id": ["L"] * 50, "refetch": [i == 7 for i in range(50)]})
    plan = plan_answer_requests(one_changed, 20)
    assert plan.grouped == []  # a lesson request would return all 50 (4 requests): one pair costs 2
    assert plan.pairs.to_pylist() == [{"user_id": "u7", "lesson_id": "L"}]

    most_changed = pa.table({"user_id": users, "lesson_id": ["L"] * 50, "refetch": [i % 5 != 0 for i in range(50)]})
    plan = plan_answer_requests(most_changed, 20)
    assert [(r.stream, r.covers) for r in plan.grouped] == [("answers_by_lesson", 50)]  # covers = what it returns
    assert plan.pairs.num_rows == 0

    nothing = pa.table({"user_id": users, "lesson_id": ["L"] * 50, "refetch": [False] * 50})
    assert plan_answer_requests(nothing, 20).request_count == 0


def test_a_pair_needs_its_answers_when_any_of_its_rows_says_so():
    table = pa.table({"user_id": ["a", "a", "b"], "lesson_id": ["1", "1", "2"], "refetch": [False, True, False]})
    assert plan_answer_requests(table, 100).pairs.to_pylist() == [{"user_id": "a", "lesson_id": "1"}]
    with pytest.raises(ValueError, match="refetch"):
        plan_answer_requests(
            pa.table({"user_id": ["a"], "lesson_id": ["1"], "refetch": pa.array([None], pa.bool_())}), 10
        )


def plan_summary(plan):
    return (
        sorted((r.stream, r.path_values, r.covers) for r in plan.grouped),
        sorted(zip(plan.pairs.column("user_id").to_pylist(), plan.pairs.column("lesson_id").to_pylist(), strict=True)),
    )


def test_dictionary_encoded_ids_plan_exactly_as_their_strings():
    # the spilled window (answer_versions.py) reaches the planner as dictionary columns, several chunks each
    # with a dictionary of its own; the plan must be the one the same ids as strings give
    users = [f"u{(i * 13) % 41}" if i % 3 else f"s{i}" for i in range(900)]  # s, x: lone pairs
    lessons = [f"l{(i * 7) % 29}" if i % 3 else f"x{i}" for i in range(900)]
    refetch = [i % 4 != 1 for i in range(900)]
    as_strings = pa.table({"user_id": users, "lesson_id": lessons, "refetch": refetch})
    chunks = [as_strings.slice(start, 300) for start in (0, 300, 600)]
    encoded = pa.concat_tables(
        [
            pa.table(
                {
                    "user_id": pc.dictionary_encode(c.column("user_id")),
                    "lesson_id": pc.dictionary_encode(c.column("lesson_id")),
                    "refetch": c.column("refetch"),
                }
            )
            for c in chunks
        ]
    )
    assert encoded.column("user_id").num_chunks == 3 and pa.types.is_dictionary(encoded.schema.field("user_id").type)
    expected = plan_summary(plan_answer_requests(as_strings, 10))
    assert expected[0] and expected[1]  # both kinds of request are in play
    assert plan_summary(plan_answer_requests(encoded, 10)) == expected


def test_a_dictionary_repeating_an_id_still_plans_one_request_for_it():
    repeated = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 3] * 10, pa.int32()), pa.array(["a", "b", "a", "b"]))
    table = pa.table({"user_id": pa.array([f"u{i}" for i in range(40)]), "lesson_id": repeated})
    plan = plan_answer_requests(table, 100)
    assert sorted((r.stream, r.path_values, r.covers) for r in plan.grouped) == [
        ("answers_by_lesson", (("lesson_id", "a"),), 20),
        ("answers_by_lesson", (("lesson_id", "b"),), 20),
    ]
    with pytest.raises(ValueError, match="null"):
        plan_answer_requests(
            pa.table({"user_id": pa.array(["u", None]).dictionary_encode(), "lesson_id": ["l", "m"]}), 10
        )


def test_the_first_drift_check_is_told_the_planned_active_lessons_it_holds_for_certain():
    """Distinct pairs whose lastDate is a resolution past the check's instant, whatever encoding the ids come in
    (the spilled window's chunks carry dictionaries of their own)."""
    from datetime import UTC, datetime, timedelta

    from pipeline.source.answers import _listed_since

    instant = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    dates = [instant + timedelta(seconds=s) for s in (-60, 1, 3, 3, 30)]  # at 1 s: maybe not listed; 3 s twice
    users, lessons = ["u1", "u2", "u3", "u3", "u4"], ["L1", "L1", "L2", "L2", "L1"]
    chunks = [
        pa.table(
            {
                "user_id": pc.dictionary_encode(pa.array(users[i:j])),
                "lesson_id": pc.dictionary_encode(pa.array(lessons[i:j])),
                "last_date": pa.array(dates[i:j], pa.timestamp("us", tz="UTC")),
            }
        )
        for i, j in ((0, 3), (3, 5))
    ]
    changed = pa.concat_tables(chunks)
    assert _listed_since(changed, instant) == 2  # u3/L2 (twice) and u4/L1
    naive = changed.set_column(2, "last_date", changed.column("last_date").cast(pa.timestamp("us")))
    assert _listed_since(naive, instant) == 2
    assert _listed_since(changed.drop_columns(["last_date"]), instant) == 0
