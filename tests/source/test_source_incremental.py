"""Incremental windows, ids with reserved characters, and quarantine, over real HTTP."""

import json
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import all_pairs, client_settings, rows_by_table, truth
from source_expect import assert_same_table, expected_tables, keyed

from pipeline.contract.tables import TABLES
from pipeline.source.client import PlatformClient
from simulator import SimulatorConfig, start_simulator

AWKWARD = ("/", "?", "#", " ", "%")


def _awkward(value: str) -> bool:
    return any(c in value for c in AWKWARD) or not value.isascii()


def test_an_incremental_window_brings_the_warehouse_back_to_the_truth():
    with start_simulator(SimulatorConfig(seed=21, scale="tiny")) as sim, PlatformClient(client_settings(sim)) as client:
        active = keyed("active_lessons", rows_by_table(client.iter_stream("active_lessons"))["active_lessons"])
        run_start = client.last_run_stats().server_time_at_start
        answers = rows_by_table(client.iter_answers(all_pairs(list(active.values()))))
        full_requests = client.last_run_stats().requests
        sim.advance(hours=24)
        window = run_start - timedelta(minutes=10)
        changed = rows_by_table(client.iter_stream("active_lessons", updated_since=window))["active_lessons"]
        assert 0 < len(changed) < len(active) / 2
        active.update(keyed("active_lessons", changed))
        table = pa.Table.from_pylist(list(active.values()))
        pairs = table.filter(pc.greater_equal(table["last_date"], pa.scalar(window, pa.timestamp("us", "UTC"))))
        delta = rows_by_table(client.iter_answers(pairs, updated_since=window))
        stats = client.last_run_stats()
        expected = expected_tables(truth(sim, "active_lessons", "answers"))
    assert stats.complete and stats.requests < full_requests
    assert_same_table("active_lessons", active.values(), expected["active_lessons"])
    merged = {t: {**keyed(t, answers[t]), **keyed(t, delta[t])} for t in ("answers", "answer_results")}
    assert_same_table("answers", merged["answers"].values(), expected["answers"])
    assert_same_table("answer_results", merged["answer_results"].values(), expected["answer_results"])


def test_ids_with_reserved_characters_address_their_own_resource(sim, client):
    groups = [g["id"] for g in sim.ground_truth("groups")]
    assert any(_awkward(g) for g in groups)
    for group_id in groups:
        assert client.get_json("/v1/groups/{group_id}", path_values={"group_id": group_id})["id"] == group_id
    session = next(s["id"] for s in sim.ground_truth("lesson_sessions") if _awkward(s["id"]))
    assert client.get_json("/v1/lesson-session/{id}", path_values={"id": session})["id"] == session
    active = list(sim.ground_truth("active_lessons"))
    odd_users = {a["_userId"] for a in active if _awkward(a["_userId"])}
    odd_lessons = {a["_lessonId"] for a in active if _awkward(a["_lessonId"])}
    assert odd_users and odd_lessons
    chosen = [a for a in active if a["_userId"] in odd_users or a["_lessonId"] in odd_lessons]
    pairs = pa.table({"user_id": [a["_userId"] for a in chosen], "lesson_id": [a["_lessonId"] for a in chosen]})
    got = rows_by_table(client.iter_answers(pairs))
    wanted = [a for a in sim.ground_truth("answers") if a["_userId"] in odd_users or a["_lessonId"] in odd_lessons]
    expected = expected_tables({"answers": wanted})
    assert_same_table("answers", got["answers"], expected["answers"])
    assert_same_table("answer_results", got["answer_results"], expected["answer_results"])


@pytest.mark.slow
def test_bad_records_are_quarantined_with_where_and_why_and_the_rest_load():
    with start_simulator(SimulatorConfig(seed=9, scale="tiny")) as sim:
        sim.plant_invalid("answers", field="quizType", value="final")
        answered = [i for i in range(sim.world.store.n) if sim.world.store.att_n[i].sum() > 0]
        unkeyed = sim.plant_invalid("answers", field="_questionId", value=None, index=answered[0])
        sim.plant_invalid("active_lessons", field="score", value="high")
        with PlatformClient(client_settings(sim)) as client:
            active = rows_by_table(client.iter_stream("active_lessons"))
            answers = rows_by_table(client.iter_answers(all_pairs(active["active_lessons"])))
            stats = client.last_run_stats()
        everything = truth(sim, "active_lessons", "answers")
    bad_answer = [a for a in everything["answers"] if a["quizType"] == "final"]
    row, missing = sorted(answers["quarantine"], key=lambda r: r["field"] != "quizType")
    assert len(bad_answer) == 1 and json.loads(row["raw"]) == bad_answer[0]
    assert missing["field"] == "_questionId" and "cannot key" in missing["message"]
    assert json.loads(missing["raw"])["_activeLessonId"] == unkeyed["_activeLessonId"]
    assert row["field"] == "quizType" and "'final'" in row["message"] and "'exit'" in row["message"]
    assert row["endpoint"].startswith("/v1/") and row["endpoint"].endswith("/answers") and row["page"] >= 1
    assert '"final"' in row["raw"] and row["stream"].startswith("answers_by_")
    assert stats.quarantined == 2
    [al_row] = active["quarantine"]
    assert al_row["field"] == "score" and al_row["endpoint"] == "/v1/active-lessons"
    assert "valid number" in al_row["message"] and "'high'" in al_row["message"]
    expected = expected_tables(
        {
            "answers": [
                a for a in everything["answers"] if a["quizType"] != "final" and a.get("_questionId") is not None
            ],
            "active_lessons": [a for a in everything["active_lessons"] if a.get("score") != "high"],
        }
    )
    assert_same_table("answers", answers["answers"], expected["answers"])
    assert_same_table("active_lessons", active["active_lessons"], expected["active_lessons"])
    assert set(TABLES["quarantine"].schema.names) <= set(row)
