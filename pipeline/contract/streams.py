"""Every stream of the platform declared as data (in the spirit of dlt's REST API source): endpoint path
template, fixed query parameters, record model, pager kind, and the tables its records yield.

Pager kinds (see pipeline/source/paging.py): "records" pages until a short page; "answers" pages over active-lesson
records until the caller-known count is covered, then confirms with an empty page; "single" is one
unpaginated request (the spec gives those operations no pagination parameters).

Import `STREAMS` from here (and `TABLES` from tables.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pipeline.contract import models as m
from pipeline.contract.tables import TABLES, ChildRow

PagerKind = Literal["records", "answers", "single"]
Expand = Callable[[Sequence[Any], Mapping[str, str]], list[ChildRow]]  # (page records, path values) -> rows

ANSWER_PARAMS = {"includeArchived": "true", "includeEntryQuiz": "true"}  # keep every attempt, both quizzes
SNAPSHOT_PARAMS = {"includeDisabled": "true"}
# How far from `updatedSince` a platform may draw its line: the spec shows neither the format nor whether it is
# inclusive, so an exclusive `>` or a comparison in whole seconds must lose nothing (pipeline/raw/windows.py, A3).
UPDATED_SINCE_RESOLUTION = timedelta(seconds=1)


@dataclass(frozen=True)
class SubStream:
    """For each record of the parent stream, run `stream` with `placeholder` = the record's `column`."""

    stream: str
    placeholder: str
    column: str


@dataclass(frozen=True)
class StreamSpec:
    name: str
    path: str  # template; placeholders are percent-encoded when filled
    model: type[m.ApiModel]
    table: str  # table of the records themselves
    pager: PagerKind
    params: Mapping[str, str] = field(default_factory=dict)
    incremental: bool = False  # accepts updatedSince = window start
    children: tuple[tuple[str, Expand], ...] = ()  # (child table, rows derived from a page)
    substream: SubStream | None = None
    description: str = ""

    def __post_init__(self) -> None:
        unknown = [t for t in (self.table, *(c for c, _ in self.children)) if t not in TABLES]
        if unknown:
            raise ValueError(f"stream {self.name}: tables {unknown} are not declared in TABLES")


def _answer_results(answers: Sequence[Any], _: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (j,), result) for i, answer in enumerate(answers) for j, result in enumerate(answer["results"])]


def _registrations(sessions: Sequence[Any], _: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (), registration) for i, session in enumerate(sessions) for registration in session["registrations"]]


def _group_members(users: Sequence[Any], path_values: Mapping[str, str]) -> list[ChildRow]:
    return [(i, (path_values["group_id"],), None) for i in range(len(users))]


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


def _answers(name: str, path: str, *, incremental: bool = False, description: str = "") -> StreamSpec:
    """A stream of answers: every answer listing shares its model, table, pager, parameters and results."""
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


STREAMS: dict[str, StreamSpec] = {
    s.name: s
    for s in [
        StreamSpec(
            "active_lessons",
            "/v1/active-lessons",
            m.ActiveLesson,
            "active_lessons",
            "records",
            incremental=True,
            description="Progress records of the owner, by last update.",
        ),
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
        StreamSpec("categories", "/v1/categories", m.Category, "categories", "single"),
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
        StreamSpec(
            "lesson_sessions",
            "/v1/lesson-session",
            m.LessonSession,
            "lesson_sessions",
            "single",
            children=(("lesson_session_registrations", _registrations),),
        ),
        StreamSpec(
            "lessons",
            "/v1/lessons",
            m.Lesson,
            "lessons",
            "records",
            children=(("lesson_questions", _lesson_questions),),
        ),
    ]
}

ANSWER_STREAMS = ("answers_by_lesson", "answers_by_user", "answers_by_user_lesson")
# The streams a run syncs, by the names runs, `lessonsync status` and the settings use (pipeline/raw/runner.py
# STREAM_TABLES: the tables each fills): the answer listings are one stream, the users of the groups are the groups'.
SYNC_STREAMS = ("active_lessons", "answers", "categories", "groups", "lesson_sessions", "lessons")
SNAPSHOT_STREAMS = ("categories", "groups", "lesson_sessions", "lessons")
