"""Every mart on the small hand-made world of conftest.py, against figures worked out by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

import duckdb
import pytest
from analytics_world import AS_OF, create_raw_tables, seed_small_world

from pipeline.analytics.build import build_models
from pipeline.analytics.models import AnalyticsProject


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, project: AnalyticsProject) -> Iterator[duckdb.DuckDBPyConnection]:
    """The small world, built once for this module (the tests only read)."""
    path = tmp_path_factory.mktemp("small") / "warehouse.duckdb"
    create_raw_tables(path)
    conn = duckdb.connect(str(path))
    seed_small_world(conn)
    results = list(build_models(conn, project, as_of=AS_OF))
    problems = [r.error for r in results if r.status != "built"]
    problems += [o.summary() for r in results for o in r.outcomes if not o.passed]
    assert problems == []
    yield conn
    conn.close()


def rows(conn: duckdb.DuckDBPyConnection, sql: str) -> dict:
    """{first column (or tuple of the key columns): rest of the row as a tuple}."""
    return {r[0]: tuple(r[1:]) for r in conn.execute(sql).fetchall()}


def test_learner_progress(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT user_id || '/' || lesson_id, status, best_score, attempts, exit_answers, time_spent, "
        "lesson_title FROM analytics.learner_progress",
    )
    assert got == {
        "U1/L1": ("succeeded", 100.0, 2, 4, 600.0, "Sécurité"),  # attempt 0: 1/2, attempt 1: 2/2
        "U2/L1": ("failed", 0.0, 1, 2, 300.0, "Sécurité"),  # pending Q1 left out, Q2 invalid by feedback
        "U3/L1": ("in-progress", 100.0, 1, 1, 100.0, "Sécurité"),
        "U4/L1": ("not-started", None, 0, 0, None, "Sécurité"),
        "U1/L2": ("succeeded", 100.0, 1, 1, 200.0, "Excel"),
        "U3/L2": ("succeeded", None, 0, 0, 400.0, "Excel"),
    }


def test_lesson_funnel(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT lesson_id, learners, not_started, started, in_progress, succeeded, failed, "
        "round(success_rate, 6), median_hours_to_success, median_time_spent_to_success "
        "FROM analytics.lesson_funnel",
    )
    assert got == {
        "L1": (4, 1, 3, 1, 1, 1, round(1 / 3, 6), 48.0, 600.0),
        "L2": (2, 0, 2, 0, 2, 0, 1.0, 18.0, 300.0),  # medians of (12 h, 24 h) and (200, 400)
        "L3": (0, 0, 0, 0, 0, 0, None, None, None),  # in the catalogue, nobody on it
    }


def test_question_difficulty(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT lesson_id || '/' || quiz_type || '/' || question_id, question_title, "
        "first_attempts, first_attempts_decided, first_attempts_correct, first_attempt_correct_rate, "
        "answers_all_attempts FROM analytics.question_difficulty",
    )
    assert got == {
        # U1 first attempt 0 correct, U2 pending (undecided), U3's first attempt is index 2: correct
        "L1/exit/Q1": ("Q1 title", 3, 2, 2, 1.0, 4),
        "L1/exit/Q2": ("Q2 title", 2, 2, 0, 0.0, 3),
        "L1/entry/Q0": ("Q0 title", 1, 1, 1, 1.0, 1),  # forced valid beats isValid false
        "L2/exit/Q5": ("Q5 (answer)", 1, 1, 1, 1.0, 1),  # not in the catalogue: title from the answer
    }


def test_group_completion(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT group_id || '/' || lesson_id, members, learners, started, succeeded, failed, "
        "round(completion_rate, 6) FROM analytics.group_completion",
    )
    assert got == {  # G3 has no member, G9 and its membership vanished at the platform
        "G1/L1": (3, 3, 3, 1, 1, round(1 / 3, 6)),
        "G1/L2": (3, 2, 2, 2, 0, round(2 / 3, 6)),
        "G2/L1": (2, 2, 1, 0, 0, 0.0),
        "G2/L2": (2, 1, 1, 1, 0, 0.5),
    }


def test_session_attendance(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT session_id, registrations, seats_taken, waiting_list, pending_validation, rejected, "
        "attended, absent, fill_rate, below_min_quota, attendance_rate FROM analytics.session_attendance",
    )
    assert got == {
        "S1": (4, 2, 1, 0, 1, 1, 1, 0.2, None, 0.5),
        "S2": (2, 1, 0, 1, 0, 1, 0, 0.2, True, 1.0),  # the deleted registration of U4 does not count
        "S3": (0, 0, 0, 0, 0, 0, 0, None, None, None),
    }


def test_certificates_on_as_of(built: duckdb.DuckDBPyConnection) -> None:
    states = rows(built, "SELECT certificate_id, state, expiring_within_30_days FROM analytics.certificates")
    assert states == {
        "C1": ("active", False),
        "C2": ("expired", False),
        "C3": ("active", True),
        "C4": ("revoked", False),
        "C5": ("active", False),
    }
    by_badge = rows(
        built,
        "SELECT badge_id, badge_name, certificates, active, expiring_within_30_days, expired, "
        "revoked, as_of FROM analytics.certificates_by_badge",
    )
    assert by_badge == {"B1": ("Sécurité", 3, 2, 1, 1, 0, AS_OF), "B2": ("Excel", 2, 1, 0, 0, 1, AS_OF)}


def test_daily_activity_by_utc_day(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT activity_date, answers, correct_answers, active_learners, lessons_answered, "
        "lessons_started, certificates_completed FROM analytics.daily_activity",
    )
    assert got == {
        date(2025, 10, 1): (0, 0, 0, 0, 0, 1),
        date(2026, 11, 1): (3, 2, 1, 1, 3, 1),
        date(2026, 11, 2): (5, 3, 2, 2, 2, 2),  # U2 answered at 01:30+02:00 on the 3rd = the 2nd in UTC
        date(2026, 11, 3): (1, 1, 1, 1, 0, 1),
    }


def test_answer_correctness_rules(built: duckdb.DuckDBPyConnection) -> None:
    got = rows(
        built,
        "SELECT user_id || '/' || quiz_type || '/' || attempt_index || '/' || question_id, "
        "is_correct, correctness_basis FROM analytics.stg_answers",
    )
    assert got["U1/entry/0/Q0"] == (True, "forced")
    assert got["U1/exit/1/Q2"] == (True, "feedback")  # a person said valid although isValid is false
    assert got["U2/exit/0/Q1"] == (None, "feedback")  # pending review: undecided
    assert got["U2/exit/0/Q2"] == (False, "feedback")  # isForcedValid false decides nothing; feedback invalid
    assert got["U1/exit/0/Q2"] == (False, "automatic")
