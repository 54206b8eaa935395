"""Helpers of the analytics tests: the `lms` tables created from the source client's TableSpecs by the
warehouse layer's own DDL (plus the certificate tables), and a small world of hand-made rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from pipeline.contract.tables import TABLES
from pipeline.warehouse import Warehouse


def create_raw_tables(path: Path) -> None:
    """A warehouse file at `path` with every lms table (certificates included), empty, exactly as the warehouse
    layer creates it."""
    Warehouse(path=path, lake_dir=path.parent / "lake").ensure_tables(TABLES.values())


def insert(conn: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Insert hand-made rows as one load would (missing columns NULL): stamped with its commit time, and the load
    recorded in lms._load_runs, so that the table's content version moves as a sync's would move it."""
    loaded_at = record_load(conn, {table: {"inserted": len(rows)}})
    for row in rows:
        row = {"first_loaded_at": loaded_at, "last_loaded_at": loaded_at, **row}
        names = ", ".join(f'"{c}"' for c in row)
        marks = ", ".join("?" for _ in row)
        conn.execute(f"INSERT INTO lms.{table} ({names}) VALUES ({marks})", list(row.values()))


def record_load(conn: duckdb.DuckDBPyConnection, counts: dict[str, dict[str, int]]) -> datetime:
    """A load's record in lms._load_runs with its per-table `counts` (inserted, updated, deleted...); returns its
    commit time, later than every earlier load's (loads commit one after another)."""
    seq, previous = conn.execute(
        "SELECT coalesce(max(load_seq), 0) + 1, max(committed_at) FROM lms._load_runs"
    ).fetchone()
    committed = max(datetime.now(UTC), previous + timedelta(microseconds=1)) if previous else datetime.now(UTC)
    conn.execute(
        "INSERT INTO lms._load_runs (load_seq, load_id, stream, run_id, started_at, committed_at, complete_snapshots, "
        "tables, stats) VALUES (?, ?, 'by-hand', 'test', ?, ?, [], ?, '{}')",
        [seq, f"test-{uuid.uuid4().hex[:8]}", committed, committed, json.dumps(counts)],
    )
    return committed


# --- A small hand-made world, with figures worked out by hand in test_marts_small.py ------------------------

AS_OF = datetime(2026, 11, 22, tzinfo=UTC)
DELETED = datetime(2026, 11, 10, tzinfo=UTC)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _progress(user: str, lesson: str, **fields: Any) -> dict[str, Any]:
    return {"owner_id": "O1", "user_id": user, "lesson_id": lesson, "title": f"{lesson} (progress title)", **fields}


def _answer(user: str, lesson: str, quiz: str, attempt: int, question: str, at: str, **fields: Any) -> dict:
    return {
        "active_lesson_id": f"AL-{user}-{lesson}",
        "user_id": user,
        "lesson_id": lesson,
        "quiz_type": quiz,
        "attempt_index": float(attempt),
        "question_id": question,
        "question_title": f"{question} (answer)",
        "last_date": ts(at),
        **fields,
    }


def _certificate(cid: str, user: str, badge: str, name: str, created: str, expires: str | None, **f: Any) -> dict:
    return {
        "id": cid,
        "user_id": user,
        "owner_id": "O1",
        "badge_id": badge,
        "rule_data_name": name,
        "creation_date": ts(created),
        "expires": ts(expires) if expires else None,
        "disabled": False,
        "updated_at": ts(created),
        "state": "completed",
        "last_event_id": f"E-{cid}",
        "last_event_type": "certificate_completed",
        "last_received_at": ts(created),
        **f,
    }


def seed_small_world(conn: duckdb.DuckDBPyConnection) -> None:
    insert(
        conn,
        "lessons",
        [
            {"id": "L1", "title": "Sécurité", "status": "online", "visibility": "public", "summary": "s"},
            {"id": "L2", "title": "Excel", "status": "online", "visibility": "public", "summary": "s"},
            {"id": "L3", "title": "Personne", "status": "draft", "visibility": "private", "summary": "s"},
        ],
    )
    insert(
        conn,
        "lesson_questions",
        [
            {
                "lesson_id": "L1",
                "notion_index": 0,
                "quiz": "exit",
                "question_index": 0,
                "question_id": "Q1",
                "question_title": "Q1 title",
                "question_type": "simple",
            },
            {
                "lesson_id": "L1",
                "notion_index": 0,
                "quiz": "exit",
                "question_index": 1,
                "question_id": "Q2",
                "question_title": "Q2 title",
                "question_type": "free-text",
            },
            {
                "lesson_id": "L1",
                "notion_index": 0,
                "quiz": "entry",
                "question_index": 0,
                "question_id": "Q0",
                "question_title": "Q0 title",
                "question_type": "truefalse",
            },
        ],
    )
    insert(
        conn,
        "users",
        [
            {
                "id": u,
                "login": u.lower(),
                "email": f"{u}@x",
                "firstname": u,
                "lastname": u,
                "alias": u,
                "locale": "fr",
                "points": 0.0,
            }
            for u in ("U1", "U2", "U3", "U4")
        ],
    )
    insert(
        conn,
        "groups",
        [
            {"id": "G1", "title": "Ventes"},
            {"id": "G2", "title": "Support"},
            {"id": "G3", "title": "Vide", "disabled": True},
            {"id": "G9", "title": "Partie", "deleted_at": DELETED},
        ],
    )
    insert(
        conn,
        "group_members",
        [
            {"group_id": "G1", "user_id": "U1"},
            {"group_id": "G1", "user_id": "U2"},
            {"group_id": "G1", "user_id": "U3"},
            {"group_id": "G2", "user_id": "U3"},
            {"group_id": "G2", "user_id": "U4"},
            {"group_id": "G9", "user_id": "U1", "deleted_at": DELETED},
        ],
    )
    insert(
        conn,
        "active_lessons",
        [
            _progress(
                "U1",
                "L1",
                stats_success=True,
                achieved=True,
                stats_progress_in_percent=100.0,
                score=90.0,
                time_spent=600.0,
                start_date=ts("2026-11-01T10:00Z"),
                last_date=ts("2026-11-03T10:00Z"),
            ),
            _progress(
                "U2",
                "L1",
                stats_success=False,
                achieved=True,
                stats_progress_in_percent=100.0,
                score=40.0,
                time_spent=300.0,
                start_date=ts("2026-11-01T12:00Z"),
                last_date=ts("2026-11-02T23:30Z"),
            ),
            _progress(
                "U3",
                "L1",
                stats_success=False,
                achieved=False,
                stats_progress_in_percent=50.0,
                time_spent=100.0,
                start_date=ts("2026-11-02T08:00Z"),
                last_date=ts("2026-11-03T08:00Z"),
            ),
            _progress("U4", "L1", stats_progress_in_percent=0.0),
            _progress(
                "U1",
                "L2",
                stats_success=True,
                stats_progress_in_percent=100.0,
                time_spent=200.0,
                start_date=ts("2026-11-02T00:00Z"),
                last_date=ts("2026-11-02T12:00Z"),
            ),
            _progress(
                "U3",
                "L2",
                stats_success=True,
                stats_progress_in_percent=100.0,
                time_spent=400.0,
                start_date=ts("2026-11-01T00:00Z"),
                last_date=ts("2026-11-02T00:00Z"),
            ),
        ],
    )
    insert(
        conn,
        "answers",
        [
            _answer("U1", "L1", "exit", 0, "Q1", "2026-11-01T10:05Z", is_valid=True),
            _answer("U1", "L1", "exit", 0, "Q2", "2026-11-01T10:05Z", is_valid=False),
            _answer("U1", "L1", "entry", 0, "Q0", "2026-11-01T10:01Z", is_valid=False, validation_is_forced_valid=True),
            _answer("U1", "L1", "exit", 1, "Q1", "2026-11-02T09:00Z", is_valid=True),
            _answer(
                "U1", "L1", "exit", 1, "Q2", "2026-11-02T09:00Z", is_valid=False, validation_feedback_status="valid"
            ),
            _answer(
                "U2",
                "L1",
                "exit",
                0,
                "Q1",
                "2026-11-03T01:30+02:00",
                is_valid=False,
                validation_feedback_status="pending",
            ),
            _answer(
                "U2",
                "L1",
                "exit",
                0,
                "Q2",
                "2026-11-03T01:30+02:00",
                is_valid=True,
                validation_feedback_status="invalid",
                validation_is_forced_valid=False,
            ),
            _answer("U3", "L1", "exit", 2, "Q1", "2026-11-03T08:00Z", is_valid=True),
            _answer("U1", "L2", "exit", 0, "Q5", "2026-11-02T10:00Z", is_valid=True),
        ],
    )
    insert(
        conn,
        "lesson_sessions",
        [
            {
                "id": "S1",
                "lesson_id": "L1",
                "title": "S1",
                "status": "online",
                "quotas_type": "max",
                "quotas_max": 10.0,
                "presenters": [],
                "on_site": True,
                "is_live": False,
            },
            {
                "id": "S2",
                "lesson_id": "L2",
                "title": "S2",
                "status": "online",
                "quotas_type": "min-max",
                "quotas_min": 3.0,
                "quotas_max": 5.0,
                "presenters": ["P"],
                "on_site": False,
                "is_live": True,
            },
            {
                "id": "S3",
                "lesson_id": "L2",
                "title": "S3",
                "status": "draft",
                "presenters": [],
                "on_site": False,
                "is_live": False,
            },
        ],
    )
    insert(
        conn,
        "lesson_session_registrations",
        [
            {"session_id": "S1", "user_id": "U1", "status": "approved", "attendance": "attended"},
            {"session_id": "S1", "user_id": "U2", "status": "approved", "attendance": "absent"},
            {"session_id": "S1", "user_id": "U3", "status": "waiting-list", "attendance": "none"},
            {"session_id": "S1", "user_id": "U4", "status": "rejected"},
            {"session_id": "S2", "user_id": "U1", "status": "pending-validation"},
            {"session_id": "S2", "user_id": "U3", "status": "approved", "attendance": "attended"},
            {"session_id": "S2", "user_id": "U4", "status": "approved", "deleted_at": DELETED},
        ],
    )
    insert(
        conn,
        "certificates",
        [
            _certificate("C1", "U1", "B1", "Sécurité", "2026-11-03T10:00Z", None),
            _certificate(
                "C2",
                "U2",
                "B1",
                "Sécurité",
                "2025-10-01T10:00Z",
                "2026-10-01T10:00Z",
                state="expired",
                last_event_type="certificate_expired",
            ),
            _certificate("C3", "U3", "B1", "Sécurité", "2026-11-01T10:00Z", "2026-12-02T10:00Z"),
            _certificate("C4", "U3", "B2", "Excel", "2026-11-02T10:00Z", "2027-06-01T10:00Z", disabled=True),
            _certificate("C5", "U1", "B2", "Excel", "2026-11-02T11:00Z", "2026-12-25T10:00Z"),
        ],
    )
    insert(
        conn,
        "certificate_events",
        [
            {
                "event_id": f"E{n}",
                "inbox_id": "I1",
                "sequence": n,
                "event_type": "certificate_completed",
                "received_at": ts("2026-11-04T00:00Z"),
                "id": c,
            }
            for n, c in enumerate(["C1", "C2", "C3", "C4", "C5"], start=1)
        ],
    )
