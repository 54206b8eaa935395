"""Writes docs/TABLES.md, the analysts' contract for the raw tables of schema `lms`, from the table
declarations themselves, so the documentation cannot drift from the code (a test checks it is current).

    python -m pipeline.docs            # rewrite docs/TABLES.md
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

from pydantic import BaseModel

from pipeline.contract import models as m
from pipeline.contract.tables import TABLES, TableSpec
from pipeline.warehouse.arrow_types import field_type
from pipeline.warehouse.schema import keeps_deleted_rows

TARGET = Path(__file__).resolve().parents[1] / "docs" / "TABLES.md"

# Which API record each table's own columns come from, and the prefix its columns carry.
SOURCES: dict[str, tuple[type[BaseModel], str, str]] = {
    "active_lessons": (m.ActiveLesson, "", "GET /v1/active-lessons"),
    "answers": (
        m.Answer,
        "",
        "GET /v1/lessons/{id}/answers, /v1/users/{id}/answers, /v1/users/{u}/lessons/{l}/answers",
    ),
    "answer_results": (m.AnswerResult, "", "Answer.results[]"),
    "groups": (m.UserGroup, "", "GET /v1/groups?includeDisabled=true"),
    "users": (m.User, "", "GET /v1/groups/{groupId}/users?includeDisabled=true"),
    "group_members": (m.User, "", "GET /v1/groups/{groupId}/users"),
    "categories": (m.Category, "", "GET /v1/categories"),
    "lesson_sessions": (m.LessonSession, "", "GET /v1/lesson-session"),
    "lesson_session_registrations": (m.LessonSessionRegistration, "", "LessonSession.registrations[]"),
    "lessons": (m.Lesson, "", "GET /v1/lessons"),
    "lesson_questions": (m.LessonQuizzQuestion, "question_", "Lesson.notions[].entryQuizz/exitQuizz.questions[]"),
    "certificate_events": (m.Certificate, "", "certificate webhooks (POST to the receiver), via the inbox"),
    "certificates": (m.Certificate, "", "certificate webhooks, latest state per _id"),
}

NOTES = {
    "extra": "fields the spec does not know yet, as JSON keyed by their dotted API path (null when none)",
    "value_number": "AnswerResult.value when it is a number",
    "value_text": "AnswerResult.value when it is a string",
    "result_index": "position of the result in Answer.results",
    "session_id": "LessonSession.id of the session",
    "group_id": "UserGroup.id of the group",
    "notion_index": "position of the notion in Lesson.notions",
    "notion_title": "LessonNotion.title",
    "quiz": "entry (entryQuizz) or exit (exitQuizz)",
    "quizz_type": "LessonQuizz.type",
    "quizz_life_number": "LessonQuizz.lifeNumber",
    "question_index": "position of the question in its quiz",
    "event_id": "identity of a distinct delivery: hash of the canonical payload and the event type",
    "event_type": "certificate_completed or certificate_expired, inferred at receipt (expires in the past -> expired)",
    "received_at": "when the receiver stored the delivery",
    "source": "X-Webhook-Source header of the delivery",
    "inbox_id": "identity of the inbox the event was read from",
    "sequence": "position of the event in the inbox (loaded in this order, exactly once)",
    "state": "completed or expired: the event type of the delivery that set the current state",
    "last_event_id": "event_id of the event that set this state",
    "last_event_type": "event_type of that event",
    "last_received_at": "received_at of that event",
    "first_loaded_at": "when LessonSync first loaded this row",
    "last_loaded_at": "when LessonSync last loaded (saw) this row",
    "deleted_at": "when the row vanished from a complete pull of its source (null = present)",
}


ANSWER_PARENT = {
    "active_lesson_id": "_activeLessonId of the answer",
    "quiz_type": "quizType of the answer",
    "attempt_index": "attemptIndex of the answer",
    "question_id": "_questionId of the answer",
}
PARENT_COLUMNS = {
    "answer_results": ANSWER_PARENT,
    "group_members": {"user_id": "User.id"},
    "lesson_questions": {"lesson_id": "Lesson.id"},
}


def api_paths(model: type[BaseModel], prefix: str = "", api_prefix: str = "") -> dict[str, str]:
    """column name -> dotted API path, by the naming rule (nested objects flattened with a prefix)."""
    paths: dict[str, str] = {}
    for name, info in model.model_fields.items():
        api_name = api_prefix + (info.alias or name)
        nested = [
            a
            for a in typing.get_args(info.annotation) or (info.annotation,)
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if nested:
            paths.update(api_paths(nested[0], f"{prefix}{name}_", api_name + "."))
        else:
            paths[prefix + name] = api_name
    return paths


def table_section(spec: TableSpec) -> str:
    model, prefix, source = SOURCES[spec.name]
    paths = api_paths(model, prefix)
    lines = [
        f"## lms.{spec.name}",
        "",
        spec.description,
        "",
        f"Source: {source}. Kind: {spec.kind}. Primary key: ({', '.join(spec.key)})."
        + (f" Cursor: {spec.cursor_field}." if spec.cursor_field else ""),
        "",
        "| column | type | API field / meaning |",
        "|---|---|---|",
    ]
    meta = ["first_loaded_at", "last_loaded_at"] + (
        ["deleted_at"] if keeps_deleted_rows(spec.kind, spec.parent) else []
    )
    for field in spec.schema:
        meaning = (
            paths.get(field.name) or NOTES.get(field.name) or PARENT_COLUMNS.get(spec.name, {}).get(field.name, "")
        )
        key = " (key)" if field.name in spec.key else ""
        lines.append(f"| {field.name}{key} | {field_type(field, spec.name)} | {meaning} |")
    lines += [f"| {name} | TIMESTAMPTZ | {NOTES[name]} |" for name in meta]
    return "\n".join(lines)


def render() -> str:
    specs = [s for s in TABLES.values() if s.name in SOURCES]
    header = (
        "# Warehouse tables (schema `lms`)\n\nGenerated by `python -m pipeline.docs` from the table "
        "declarations; do not edit by hand. Naming: the API field in snake_case without leading "
        "underscores; nested objects flattened with the parent name as prefix; date-times are "
        "TIMESTAMPTZ (UTC); lists of objects are JSON. A table's primary key is unique and never null "
        "(every load keeps one row per key, and the `key_unique_not_null` check verifies it; DuckDB "
        "holds no index on it). Rows of snapshot tables are never dropped: "
        "`deleted_at` marks those that vanished. Sync state lives in `lms._sync_state` (cursor per "
        "stream; for the certificate inbox, its position) and `lms._load_runs` (one row per committed "
        "load, with per-table counts); records that broke their schema are kept raw in `lms.quarantine`.\n\n"
    )
    return header + "\n\n".join(table_section(s) for s in specs) + "\n"


if __name__ == "__main__":
    TARGET.parent.mkdir(exist_ok=True)
    TARGET.write_text(render())
    print(f"wrote {TARGET}", file=sys.stderr)
