"""Answer request planning: every changed pair covered, grouped requests when cheaper, Arrow only."""

import pyarrow as pa
import pytest

from pipeline.source.answers import PAIR_COST, plan_answer_requests


def covered(plan, pairs):
    lessons = {dict(r.path_values)["lesson_id"] for r in plan.grouped if r.stream == "answers_by_lesson"}
    users = {dict(r.path_values)["user_id"] for r in plan.grouped if r.stream == "answers_by_user"}
    singles = set(zip(plan.pairs.column("user_id").to_pylist(), plan.pairs.column("lesson_id").to_pylist(),
                      strict=True))
    return all(lesson in lessons or user in users or (user, lesson) in singles for user, lesson in pairs)


def test_one_lesson_many_users_is_one_lesson_request():
    pairs = [(f"u{i}", "L") for i in range(50)]
    plan = plan_answer_requests(pa.table({"user_id": [u for u, _ in pairs], "lesson_id": ["L"] * 50}), 20)
    assert [(r.stream, r.path_values, r.covers) for r in plan.grouped] == [
        ("answers_by_lesson", (("lesson_id", "L"),), 50)]
    assert plan.pairs.num_rows == 0
    assert plan.estimated_cost(20) == 4  # 3 pages + confirm


def test_scattered_pairs_stay_pair_requests_and_duplicates_collapse():
    table = pa.table({"user_id": ["a", "b", "a"], "lesson_id": ["1", "2", "1"]})
    plan = plan_answer_requests(table, 100)
    assert plan.grouped == []
    assert sorted(plan.pairs.to_pylist(), key=str) == [{"user_id": "a", "lesson_id": "1"},
                                                       {"user_id": "b", "lesson_id": "2"}]
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
        plan_answer_requests(pa.table({"user_id": ["a"], "lesson_id": ["1"], "refetch": pa.array([None], pa.bool_())}), 10)
