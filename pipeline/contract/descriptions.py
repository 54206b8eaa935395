"""What each column of each warehouse table (schema `lms`) means, for analysts: the one source of the column
descriptions that docs/TABLES.md, the warehouse's `COMMENT ON COLUMN`, the published snapshot and the Dagster
assets' column schemas show. A column of an API record is described by its API field (the naming rule of
models.py, read back from the pydantic models); a column LessonSync adds (positions, context, load metadata)
by a note here. A table's description is its TableSpec's."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from pipeline.contract import models as m
from pipeline.contract.streams import STREAMS
from pipeline.contract.tables import TABLES, TableSpec

# Which API record each table's own columns come from, the prefix its columns carry, and where it is read; a table
# not named here is described from the endpoint listing that fills it (source_of).
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

# Columns that are not an API field of the table's record, by name (the same meaning in every table).
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
}
LOAD_COLUMNS = {
    "first_loaded_at": "when LessonSync first loaded this row",
    "last_loaded_at": "when LessonSync last loaded (saw) this row",
    "deleted_at": "when the row vanished from a complete pull of its source (null = present)",
}
# A complete snapshot writes only the rows it changes: when it saw the others is in its load record.
SNAPSHOT_LOAD_COLUMNS = {
    "last_loaded_at": "when a load last wrote this row: inserted, changed or revived it (or re-read it in a pull "
    "that was not complete); a complete pull sees every live row without writing it: lms._snapshot_seen says when",
}
QUARANTINE_COLUMNS = {
    "seen_at": "when the load met the record",
    "stream": "the stream that read it",
    "endpoint": "the API path of the page it came in",
    "params": "the page's query parameters, as JSON",
    "page": "the page's number in its sweep",
    "record_index": "position of the record in its page",
    "field": "the field that broke the schema (dotted path)",
    "message": "why the record was refused",
    "raw": "the record as received, as JSON",
}

# Tables of schema lms declared outside TABLES (sync state kept as a table), by name.
OTHER_TABLES = {
    "answers_synced_versions": {
        "owner_id": "the owner of the active lesson (_ownerId)",
        "user_id": "the learner (_userId)",
        "lesson_id": "the lesson (_lessonId)",
        "last_date": "the active lesson's lastDate when its answers were last synced",
    },
}

_ANSWER_PARENT = {
    "active_lesson_id": "_activeLessonId of the answer",
    "quiz_type": "quizType of the answer",
    "attempt_index": "attemptIndex of the answer",
    "question_id": "_questionId of the answer",
}
PARENT_COLUMNS = {
    "answer_results": _ANSWER_PARENT,
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


def source_of(table: str) -> tuple[type[BaseModel], str, str] | None:
    """SOURCES' entry of `table`, else its listing's record model and request (a table whose stream was added by its
    declaration alone); None for a table no listing fills (the quarantine)."""
    if table in SOURCES:
        return SOURCES[table]
    listing = next((endpoint for endpoint in STREAMS.values() if endpoint.table == table), None)
    return None if listing is None else (listing.model, "", listing.where())


def column_descriptions(spec: TableSpec) -> dict[str, str]:
    """Every data column of `spec` -> its description, then the load metadata columns (each table has the ones
    its kind keeps); a column nobody described is missing (undocumented_columns lists them). A table the
    contract does not know (a test's) gets the notes that apply by name."""
    source = source_of(spec.name)
    if spec.name == "quarantine":
        described = dict(QUARANTINE_COLUMNS)
    elif source is None:
        described = OTHER_TABLES.get(spec.name) or {f.name: NOTES.get(f.name, "") for f in spec.schema}
    else:
        model, prefix, _ = source
        paths = api_paths(model, prefix)
        parents = PARENT_COLUMNS.get(spec.name, {})
        described = {
            f.name: (f"API field {paths[f.name]}" if f.name in paths else NOTES.get(f.name) or parents.get(f.name, ""))
            for f in spec.schema
        }
    loaded = LOAD_COLUMNS | (SNAPSHOT_LOAD_COLUMNS if spec.kind == "snapshot" else {})
    return {name: text for name, text in described.items() if text} | loaded


def undocumented_columns() -> list[str]:
    """`table.column` of every data column without a description (a test keeps this empty)."""
    return [
        f"{spec.name}.{f.name}"
        for spec in TABLES.values()
        for f in spec.schema
        if f.name not in column_descriptions(spec)
    ]
