"""Every stream LessonSync syncs from the platform, declared once: its endpoints, the tables it fills (built from the
record models: tables.py), its kind, Dagster group, deps and links. Everything else derives from these (streams.py
says what; docs/adding-a-stream.md walks through adding one). Registered in this order, which is the order of
TABLES, docs/TABLES.md and dbt_like_sql/sources.yml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from pipeline.contract import models as m
from pipeline.contract.columns import ModelColumns
from pipeline.contract.streams import (
    ANSWER_PARAMS,
    SNAPSHOT_PARAMS,
    Link,
    Planned,
    StreamSpec,
    SubStream,
    SyncStream,
    register,
)
from pipeline.contract.tables import ChildRow, child_table, record_table

# Progress: the active lessons by cursor, and the answers planned from them.

ANSWER_KEY = ("active_lesson_id", "quiz_type", "attempt_index", "question_id")

ACTIVE_LESSONS = record_table(
    "active_lessons",
    m.ActiveLesson,
    ("owner_id", "user_id", "lesson_id"),
    "incremental",
    "Progress of one user on one lesson.",
    cursor="last_date",
)
ANSWERS = record_table(
    "answers",
    m.Answer,
    ANSWER_KEY,
    "incremental",
    "One answer of a user to one question, every attempt of entry and exit quizzes.",
    exclude=frozenset({"results"}),
    cursor="last_date",
)
ANSWER_RESULTS = child_table(
    "answer_results",
    ANSWERS,
    tuple((k, k) for k in ANSWER_KEY),
    [pa.field("result_index", pa.int64())],
    ModelColumns(m.AnswerResult),
    (*ANSWER_KEY, "result_index"),
    "One result (choice, text, number...) of an answer.",
)


def _answer_results(answers: Sequence[Any], _: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (j,), result) for i, answer in enumerate(answers) for j, result in enumerate(answer["results"])]


def _answers(name: str, path: str, *, incremental: bool = False, description: str = "") -> StreamSpec:
    """An answer listing: every one shares its model, table, pager, parameters and results."""
    return StreamSpec(
        name,
        path,
        m.Answer,
        "answers",
        "answers",
        params=ANSWER_PARAMS,
        incremental=incremental,
        children=(("answer_results", _answer_results),),
        description=description,
    )


ACTIVE_LESSONS_STREAM = SyncStream(
    "active_lessons",
    "incremental",
    endpoints=(
        StreamSpec(
            "active_lessons",
            "/v1/active-lessons",
            m.ActiveLesson,
            "active_lessons",
            "records",
            incremental=True,
            description="Progress records of the owner, by last update.",
        ),
    ),
    tables=(ACTIVE_LESSONS,),
    group="progress",
)
ANSWERS_STREAM = SyncStream(
    "answers",
    "planned",
    endpoints=(
        _answers(
            "answers_by_lesson",
            "/v1/lessons/{lesson_id}/answers",
            incremental=True,
            description="Answers of every user on one lesson.",
        ),
        _answers(
            "answers_by_user",
            "/v1/users/{user_id}/answers",
            incremental=True,
            description="Answers of one user on every lesson.",
        ),
        _answers(
            "answers_by_user_lesson",
            "/v1/users/{user_id}/lessons/{lesson_id}/answers",
            description="Answers of one user on one lesson (no updatedSince on this endpoint).",
        ),
    ),
    tables=(ANSWERS, ANSWER_RESULTS),
    group="progress",
    # the answers follow the lessons they answer; a child table follows its parent
    deps={"answers": ("active_lessons",), "answer_results": ("answers",)},
    links=(
        Link("answers", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}),
        Link("answer_results", "answers", {k: k for k in ANSWER_KEY}),
    ),
    planned=Planned(parent="active_lessons", planner="answers"),
    early_insert=True,
)

# Directory: the groups, then the users of each group.

GROUPS = record_table("groups", m.UserGroup, ("id",), "snapshot", "User groups, disabled ones included.")
USERS = record_table(
    "users",
    m.User,
    ("id",),
    "snapshot",
    "Users of the groups; a user in several groups is "
    "one row (the client yields it once per group: dedupe on the key).",
)
GROUP_MEMBERS = child_table(
    "group_members",
    USERS,
    (("id", "user_id"),),
    [pa.field("group_id", pa.string())],
    None,
    ("group_id", "user_id"),
    "Which user belongs to which group.",
    context_first=True,
    linked=False,
)


def _group_members(users: Sequence[Any], path_values: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (path_values["group_id"],), None) for i in range(len(users))]


GROUPS_STREAM = SyncStream(
    "groups",
    "snapshot",
    endpoints=(
        StreamSpec(
            "groups",
            "/v1/groups",
            m.UserGroup,
            "groups",
            "records",
            params=SNAPSHOT_PARAMS,
            substream=SubStream("group_users", "group_id", "id"),
            description="Groups, then the users of each group.",
        ),
        StreamSpec(
            "group_users",
            "/v1/groups/{group_id}/users",
            m.User,
            "users",
            "records",
            params=SNAPSHOT_PARAMS,
            children=(("group_members", _group_members),),
        ),
    ),
    tables=(GROUPS, USERS, GROUP_MEMBERS),
    group="directory",
    links=(
        Link("group_members", "groups", {"group_id": "id"}),
        Link("group_members", "users", {"user_id": "id"}),
    ),
)

# Catalog: the categories.

CATEGORIES = record_table("categories", m.Category, ("id",), "snapshot", "Lesson categories.")
CATEGORIES_STREAM = SyncStream(
    "categories",
    "snapshot",
    endpoints=(StreamSpec("categories", "/v1/categories", m.Category, "categories", "single"),),
    tables=(CATEGORIES,),
    group="catalog",
)

# Sessions: the scheduled lesson sessions and their registrations.

SESSIONS = record_table(
    "lesson_sessions",
    m.LessonSession,
    ("id",),
    "snapshot",
    "Scheduled sessions of lessons.",
    exclude=frozenset({"registrations"}),
)
REGISTRATIONS = child_table(
    "lesson_session_registrations",
    SESSIONS,
    (("id", "session_id"),),
    [],
    ModelColumns(m.LessonSessionRegistration),
    ("session_id", "user_id"),
    "Users registered to a lesson session.",
)


def _registrations(sessions: Sequence[Any], _: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (), registration) for i, session in enumerate(sessions) for registration in session["registrations"]]


LESSON_SESSIONS_STREAM = SyncStream(
    "lesson_sessions",
    "snapshot",
    endpoints=(
        StreamSpec(
            "lesson_sessions",
            "/v1/lesson-session",
            m.LessonSession,
            "lesson_sessions",
            "single",
            children=(("lesson_session_registrations", _registrations),),
        ),
    ),
    tables=(SESSIONS, REGISTRATIONS),
    group="sessions",
    links=(Link("lesson_session_registrations", "lesson_sessions", {"session_id": "id"}),),
)

# Catalog: the lessons, and the quiz questions of their notions.

LESSONS = record_table(
    "lessons", m.Lesson, ("id",), "snapshot", "Lessons of the catalogue; notions kept whole as JSON."
)
LESSON_QUESTIONS = child_table(
    "lesson_questions",
    LESSONS,
    (("id", "lesson_id"),),
    [
        pa.field("notion_index", pa.int64()),
        pa.field("notion_title", pa.string()),
        pa.field("quiz", pa.string()),  # "entry" (entryQuizz) or "exit" (exitQuizz)
        pa.field("quizz_type", pa.string()),
        pa.field("quizz_life_number", pa.float64()),
        pa.field("question_index", pa.int64()),
    ],
    ModelColumns(m.LessonQuizzQuestion, prefix="question_"),
    ("lesson_id", "notion_index", "quiz", "question_index"),
    "Quiz questions of every lesson notion (entry and exit quizzes), for question-level analysis.",
)


def _lesson_questions(lessons: Sequence[Any], _: Mapping[str, str]) -> list[ChildRow]:
    rows: list[ChildRow] = []
    for i, lesson in enumerate(lessons):
        for notion_index, notion in enumerate(lesson.get("notions") or ()):
            for quiz, quizz in (("entry", notion.get("entryQuizz")), ("exit", notion.get("exitQuizz"))):
                for question_index, question in enumerate((quizz.get("questions") or ()) if quizz else ()):
                    context = (
                        notion_index,
                        notion["title"],
                        quiz,
                        quizz.get("type"),
                        quizz.get("lifeNumber"),
                        question_index,
                    )
                    rows.append((i, context, question))
    return rows


LESSONS_STREAM = SyncStream(
    "lessons",
    "snapshot",
    endpoints=(
        StreamSpec(
            "lessons",
            "/v1/lessons",
            m.Lesson,
            "lessons",
            "records",
            children=(("lesson_questions", _lesson_questions),),
        ),
    ),
    tables=(LESSONS, LESSON_QUESTIONS),
    group="catalog",
)

register(
    ACTIVE_LESSONS_STREAM, ANSWERS_STREAM, GROUPS_STREAM, CATEGORIES_STREAM, LESSON_SESSIONS_STREAM, LESSONS_STREAM
)
ANSWER_STREAMS = tuple(endpoint.name for endpoint in ANSWERS_STREAM.endpoints)  # the answer listings
