"""Every mart recomputed with pandas straight from the simulator's ground truth (API records, API field
names), independently of the warehouse, the staging SQL and the sync. Rules are the documented ones
(stg_active_lessons.sql for status, stg_answers.sql for correctness)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

GroundTruth = Callable[[str], Iterable[dict[str, Any]]]


def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True, format="ISO8601")


def status_of(record: dict[str, Any]) -> str:
    stats = record.get("stats") or {}
    success = stats.get("success")
    if (success if success is not None else record.get("achieved")) is True:
        return "succeeded"
    progress = stats.get("progressInPercent")
    if progress is not None and progress >= 100:
        return "failed"
    if progress is not None and progress > 0:
        return "in-progress"
    return "not-started"


def correctness_of(record: dict[str, Any]) -> bool | None:
    validation = record.get("validation") or {}
    if validation.get("isForcedValid") is True:
        return True
    status = (validation.get("feedback") or {}).get("status")
    if status in ("valid", "invalid"):
        return status == "valid"
    if status == "pending":
        return None
    return record.get("isValid")


def progress_frame(truth: GroundTruth) -> pd.DataFrame:
    rows = [
        {
            "user_id": r["_userId"],
            "lesson_id": r["_lessonId"],
            "status": status_of(r),
            "time_spent": r.get("timeSpent"),
            "start": r.get("startDate"),
            "last": r.get("lastDate"),
            "score": r.get("score"),
            "title": r.get("title"),
        }
        for r in truth("active_lessons")
    ]
    frame = pd.DataFrame(rows)
    frame["start"], frame["last"] = _utc(frame["start"]), _utc(frame["last"])
    return frame


def answers_frame(truth: GroundTruth) -> pd.DataFrame:
    rows = [
        {
            "active_lesson_id": r["_activeLessonId"],
            "user_id": r["_userId"],
            "lesson_id": r["_lessonId"],
            "quiz_type": r["quizType"],
            "attempt": int(r["attemptIndex"]),
            "question_id": r["_questionId"],
            "title": r.get("questionTitle"),
            "at": r.get("lastDate"),
            "correct": correctness_of(r),
        }
        for r in truth("answers")
    ]
    frame = pd.DataFrame(rows)
    frame["at"] = _utc(frame["at"])
    frame["correct"] = frame["correct"].astype("boolean")
    return frame


def learner_progress(progress: pd.DataFrame, answers: pd.DataFrame) -> pd.DataFrame:
    exits = answers[answers["quiz_type"] == "exit"]
    per_attempt = exits.groupby(["user_id", "lesson_id", "attempt"]).agg(
        answers=("correct", "size"), decided=("correct", "count"), correct=("correct", "sum")
    )
    per_attempt["score"] = (100.0 * per_attempt["correct"] / per_attempt["decided"]).where(per_attempt["decided"] > 0)
    per_lesson = per_attempt.groupby(["user_id", "lesson_id"]).agg(
        attempts=("answers", "size"), exit_answers=("answers", "sum"), best_score=("score", "max")
    )
    out = progress.set_index(["user_id", "lesson_id"]).join(per_lesson, how="left")
    out["attempts"] = out["attempts"].fillna(0).astype("int64")
    out["exit_answers"] = out["exit_answers"].fillna(0).astype("int64")
    return out[["status", "best_score", "attempts", "exit_answers", "time_spent"]].sort_index()


def lesson_funnel(progress: pd.DataFrame, truth: GroundTruth) -> pd.DataFrame:
    lesson_ids = {lesson["id"] for lesson in truth("lessons")} | set(progress["lesson_id"])
    rows = []
    for lesson_id in sorted(lesson_ids):
        mine = progress[progress["lesson_id"] == lesson_id]
        counts = mine["status"].value_counts()
        won = mine[mine["status"] == "succeeded"]
        hours = (won["last"] - won["start"]).dt.total_seconds() / 3600.0
        started = len(mine) - int(counts.get("not-started", 0))
        rows.append(
            {
                "lesson_id": lesson_id,
                "learners": len(mine),
                "not_started": int(counts.get("not-started", 0)),
                "started": started,
                "in_progress": int(counts.get("in-progress", 0)),
                "succeeded": int(counts.get("succeeded", 0)),
                "failed": int(counts.get("failed", 0)),
                "success_rate": counts.get("succeeded", 0) / started if started else None,
                "median_hours_to_success": hours.median() if len(won) else None,
                "median_time_spent_to_success": won["time_spent"].median() if len(won) else None,
            }
        )
    return pd.DataFrame(rows).set_index("lesson_id")


def catalogue_questions(truth: GroundTruth) -> dict[tuple[str, str, str], str]:
    """(lesson, quiz, question id) -> title, from the Lesson records' notions."""
    titles: dict[tuple[str, str, str], str] = {}
    for lesson in truth("lessons"):
        for notion in lesson.get("notions") or []:
            for quiz, field in (("entry", "entryQuizz"), ("exit", "exitQuizz")):
                for question in (notion.get(field) or {}).get("questions") or []:
                    if question.get("id") is not None:
                        titles.setdefault((lesson["id"], quiz, question["id"]), question["title"])
    return titles


def question_difficulty(answers: pd.DataFrame, truth: GroundTruth) -> pd.DataFrame:
    keys = ["lesson_id", "quiz_type", "question_id"]
    first_attempt = answers.groupby(["active_lesson_id", "quiz_type", "question_id"])["attempt"].transform("min")
    firsts = answers[answers["attempt"] == first_attempt]
    out = firsts.groupby(keys).agg(
        first_attempts=("correct", "size"),
        first_attempts_decided=("correct", "count"),
        first_attempts_correct=("correct", "sum"),
    )
    out["first_attempt_correct_rate"] = out["first_attempts_correct"] / out["first_attempts_decided"]
    out["answers_all_attempts"] = answers.groupby(keys).size()
    latest = answers.sort_values("at").groupby(keys)["title"].last()
    catalogue = catalogue_questions(truth)
    out["question_title"] = [catalogue.get(key, latest[key]) for key in out.index]
    return out.sort_index()


def group_completion(progress: pd.DataFrame, truth: GroundTruth) -> pd.DataFrame:
    members = pd.DataFrame([{"group_id": m["groupId"], "user_id": m["id"]} for m in truth("group_members")])
    sizes = members.groupby("group_id").size().rename("members")
    joined = members.merge(progress[["user_id", "lesson_id", "status"]], on="user_id")
    out = joined.groupby(["group_id", "lesson_id"]).agg(
        learners=("status", "size"),
        started=("status", lambda s: int((s != "not-started").sum())),
        succeeded=("status", lambda s: int((s == "succeeded").sum())),
        failed=("status", lambda s: int((s == "failed").sum())),
    )
    out = out.join(sizes, on="group_id")
    out["completion_rate"] = out["succeeded"] / out["members"]
    return out.sort_index()


def session_attendance(truth: GroundTruth) -> pd.DataFrame:
    rows = []
    for session in truth("lesson_sessions"):
        registrations = session.get("registrations") or []
        statuses = [r["status"] for r in registrations]
        attendance = [r.get("attendance") for r in registrations]
        quota = session.get("quotas") or {}
        approved, attended, absent = (
            statuses.count("approved"),
            attendance.count("attended"),
            attendance.count("absent"),
        )
        has_max = quota.get("type") in ("max", "min-max") and (quota.get("max") or 0) > 0
        rows.append(
            {
                "session_id": session["id"],
                "registrations": len(registrations),
                "seats_taken": approved,
                "waiting_list": statuses.count("waiting-list"),
                "rejected": statuses.count("rejected"),
                "attended": attended,
                "absent": absent,
                "fill_rate": approved / quota["max"] if has_max else None,
                "below_min_quota": approved < quota["min"] if quota.get("type") in ("min", "min-max") else None,
                "attendance_rate": attended / (attended + absent) if attended + absent else None,
            }
        )
    return pd.DataFrame(rows).set_index("session_id").sort_index()


def certificate_states(truth: GroundTruth, as_of: datetime) -> pd.DataFrame:
    rows = []
    for c in truth("certificates"):
        expires = pd.Timestamp(c["expires"]) if c.get("expires") else None
        if c.get("disabled"):
            state = "revoked"
        elif expires is not None and expires <= as_of:
            state = "expired"
        else:
            state = "active"
        soon = state == "active" and expires is not None and expires <= as_of + timedelta(days=30)
        rows.append({"certificate_id": c["_id"], "badge_id": c.get("_badgeId"), "state": state, "soon": soon})
    return pd.DataFrame(rows)


def certificates_by_badge(truth: GroundTruth, as_of: datetime) -> pd.DataFrame:
    states = certificate_states(truth, as_of)
    out = states.groupby("badge_id", dropna=False).agg(
        certificates=("state", "size"),
        active=("state", lambda s: int((s == "active").sum())),
        expiring_within_30_days=("soon", "sum"),
        expired=("state", lambda s: int((s == "expired").sum())),
        revoked=("state", lambda s: int((s == "revoked").sum())),
    )
    return out.sort_index()


def daily_activity(progress: pd.DataFrame, answers: pd.DataFrame, truth: GroundTruth) -> pd.DataFrame:
    by_answer = (
        answers.dropna(subset=["at"])
        .assign(day=lambda f: f["at"].dt.date)
        .groupby("day")
        .agg(
            answers=("correct", "size"),
            correct_answers=("correct", "sum"),
            active_learners=("user_id", "nunique"),
            lessons_answered=("lesson_id", "nunique"),
        )
    )
    starts = progress.dropna(subset=["start"]).groupby(progress["start"].dt.date).size().rename("lessons_started")
    completed = [
        pd.Timestamp(c["creationDate"]).tz_convert("UTC").date() for c in truth("certificates") if c.get("creationDate")
    ]
    certified = pd.Series(completed, dtype=object).value_counts().rename("certificates_completed")
    out = by_answer.join(starts, how="outer").join(certified, how="outer").fillna(0).astype("int64")
    out.index.name = "activity_date"
    return out.sort_index()
