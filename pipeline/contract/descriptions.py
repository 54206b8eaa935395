"""What each column of each warehouse table (schema `lms`) means, for analysts: the one source of the column
descriptions that docs/TABLES.md, the warehouse's `COMMENT ON COLUMN`, the published snapshot, the Iceberg tables
and the Dagster assets' column schemas show. A column of an API record is described by what its API field means
(MEANINGS) followed by the field's name, `(API field stats.progressInPercent)` (the naming rule of models.py, read
back from the pydantic models); a column LessonSync adds (positions, context, load metadata) by a note here. A
table's description is its TableSpec's.

A meaning states the field's unit, range and values where the spec (shared/platform-api.md) gives them. The spec
gives few: where LessonSync's simulator shows one the text says so ("in LessonSync's simulator"), and where nothing
does it says that the spec does not specify it, so that no reader takes a guess for the platform's word."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from pipeline.contract import models as m
from pipeline.contract.evolution import DESCRIPTION_METADATA
from pipeline.contract.streams import STREAMS
from pipeline.contract.tables import ANSWER_VERSIONS_TABLE, TABLES, TableSpec

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

_SIMULATED_MS = "unit and epoch not specified; milliseconds since 1970-01-01 UTC in LessonSync's simulator"
_QUESTION_TYPES = (
    "simple, swipecards, image-map, label-matching, multiple, truefalse, checkbox, order, gap-fill, satisfaction, "
    "evaluation, free-text, free-text-image-b64 or free-number"
)
# What each API field of each record means, by dotted API path.
MEANINGS: dict[type[BaseModel], dict[str, str]] = {
    m.ActiveLesson: {
        "stats.progressInPercent": "the learner's progress through the lesson, in percent, 0-100",
        "stats.nbIncorrectAnswers": "number of incorrect answers the platform counts for the learner on the lesson; "
        "which attempts count is not specified; LessonSync's simulator counts the current exit-quiz attempt",
        "stats.nbCorrectAnswers": "number of correct answers the platform counts for the learner on the lesson; "
        "which attempts count is not specified; LessonSync's simulator counts the current exit-quiz attempt",
        "stats.success": "whether the learner succeeded the lesson, as the platform judges it",
        "stats.validationThreshold": "score the learner needs to succeed the lesson; unit not specified; percent "
        "of exit-quiz questions right, 50-80, in LessonSync's simulator",
        "version": "a version number the spec does not explain; the lesson's version, as in "
        "answers.lesson_version, in LessonSync's simulator",
        "successRate": "the learner's success rate on the lesson; scale and basis not specified; a fraction 0-1 "
        "in LessonSync's simulator: right answers / answers of the current exit-quiz attempt",
        "score": "the learner's score on the lesson; unit not specified (the lesson-status callback sends scores "
        "as integers 0-100); percent of exit-quiz questions right, 0-100, in LessonSync's simulator",
        "_ownerId": "the owner (organisation account) of the record",
        "_userId": "the learner: User.id",
        "_lessonId": "the lesson: Lesson.id",
        "timeSpent": "time the learner spent on the lesson; unit not specified; seconds in LessonSync's simulator",
        "achieved": "whether the lesson is achieved; semantics not specified beside stats.success; the same value "
        "in LessonSync's simulator",
        "lastDate": "when the record last changed; the incremental sync's cursor, sent as updatedSince",
        "startDate": "when the learner started the lesson",
        "title": "title of the lesson, as the progress record carries it",
    },
    m.Answer: {
        "attemptIndex": "which attempt at the quiz the answer belongs to (earlier attempts' answers are read with "
        "includeArchived); numbering not specified; 0 for the first in LessonSync's simulator",
        "quizType": "the quiz answered: entry or exit; entry-quiz answers are read with includeEntryQuiz",
        "_activeLessonId": "the progress record (active lesson) the answer belongs to; active lessons carry no id "
        "in the API: join them on user_id and lesson_id",
        "_lessonId": "the lesson: Lesson.id",
        "_userId": "the learner: User.id",
        "_questionId": "the question answered; lesson_questions.question_id where the catalogue carries question "
        "ids, which the spec does not list",
        "questionTitle": "title of the question, as the answer carries it",
        "lessonVersion": "version of the lesson answered; numbering not specified",
        "lastDate": "when the answer last changed; the incremental sync's cursor, sent as updatedSince",
        "startTimeStamp": f"when the learner started answering, as a number; {_SIMULATED_MS}",
        "endTimeStamp": f"when the learner finished answering, as a number; {_SIMULATED_MS}",
        "isValid": "whether the platform judged the answer correct; a review (validation) may decide otherwise",
        "validation.feedback.status": "the review's verdict on the answer: pending, valid or invalid",
        "validation.feedback.title": "title of the review's feedback",
        "validation.forcedValidationType": "who forced the answer's validation: admin or coach",
        "validation.isForcedValid": "whether the forced validation made the answer valid",
    },
    m.AnswerResult: {
        "position.left": "horizontal position of the point answered (image-map questions); unit not specified; "
        "0-100 in LessonSync's simulator",
        "position.top": "vertical position of the point answered (image-map questions); unit not specified; "
        "0-100 in LessonSync's simulator",
        "labelName": "label of what the result picks or fills (a choice, a zone, a gap); semantics not specified",
        "type": "kind of value: text, number, image-base-64 for an image in base 64, or choice-ref for a choice",
    },
    m.UserGroup: {
        "title": "name of the group",
        "id": "identifier of the group",
        "uniqueName": "unique name of the group, by which GET /v1/groups/name/{uniqueName} reads it",
        "description": "description of the group",
        "type": "type of the group; its values are not specified",
        "disabled": "whether the group is disabled; disabled groups are read with includeDisabled",
        "nbUser": "number of users in the group, as the platform counts them; whether disabled users count is not "
        "specified; they do in LessonSync's simulator",
        "nbActiveUser": "number of active users in the group; what makes a user active is not specified; not "
        "disabled, in LessonSync's simulator",
    },
    m.User: {
        "locale": "the user's locale; format not specified; language-region, e.g. fr-FR, in LessonSync's simulator",
        "points": "the user's points on the platform; how they are earned is not specified",
        "login": "the user's login",
        "email": "the user's email address",
        "firstname": "the user's first name",
        "lastname": "the user's last name",
        "alias": "the user's alias, a display name; semantics not specified",
        "id": "identifier of the user",
    },
    m.Category: {
        "name": "name of the category",
        "ownerID": "the owner (organisation account) of the category",
        "id": "identifier of the category",
        "description": "description of the category, when it has one",
    },
    m.LessonSession: {
        "id": "identifier of the session",
        "guid": "a globally unique identifier of the session besides id; semantics not specified",
        "title": "title of the session",
        "description": "description of the session",
        "lessonId": "the lesson the session is for: Lesson.id",
        "creatorId": "the user who created the session",
        "status": "status of the session: draft, online, cancelled or deleted",
        "quotas.type": "kind of quota, which says whether min and max apply: none, max, min or min-max",
        "quotas.min": "the quota's minimum, for types min and min-max; what it counts is not specified; "
        "approved registrations, in the session_attendance mart",
        "quotas.max": "the quota's maximum, for types max and min-max; what it counts is not specified; "
        "approved registrations, in the session_attendance mart",
        "startDate": "when the session starts",
        "endDate": "when the session ends",
        "creationDate": "when the session was created",
        "presenters": "the session's presenters; what the strings name is not specified; user ids in LessonSync's "
        "simulator",
        "codes": "the session's codes, as JSON: [{type: qr, barcode or access, value}]",
        "location.lang": "language of the location's texts",
        "location.name": "name of the place",
        "location.room": "room of the place",
        "location.description": "description of the place",
        "location.address": "address of the place",
        "location.name_i18n": "the place's name in several languages, as JSON: [{lang, value}]",
        "location.description_i18n": "the place's description in several languages, as JSON: [{lang, value}]",
        "onSite": "whether the session takes place on site",
        "isLive": "whether the session is live; the create request calls it hasLive; semantics not specified",
    },
    m.LessonSessionRegistration: {
        "userId": "the registered user",
        "status": "status of the registration: waiting-list, pending-validation, approved or rejected",
        "signatureDate": "when the registration was signed, null when it was not; what is signed is not specified",
        "registrationDate": "when the user registered",
        "attendance": "the user's attendance at the session: attended, absent or none",
    },
    m.Lesson: {
        "status": "status of the lesson in the catalogue: saved, submit, online, refused, deleted or draft",
        "visibility": "public or private",
        "summary": "summary of the lesson",
        "title": "title of the lesson",
        "id": "identifier of the lesson",
        "playMode": "how the lesson is played: standard (the default), battle or adaptive",
        "categoryIds": "the lesson's categories: Category.id values",
        "trackIds": "the tracks the lesson belongs to: Track.id values",
        "level": "level of the lesson: beginning, intermediary or expert",
        "images": "images of the lesson, as JSON: [{type: original, site, site-low-res, mobile, small, tiny or "
        "specific, url}]",
        "image": "public URL of the lesson's image",
        "notions": "the lesson's notions, as JSON: each with its title, description, contents and entry and exit "
        "quizzes, whose questions are rows of lesson_questions",
    },
    m.LessonQuizzQuestion: {
        "type": f"kind of question: {_QUESTION_TYPES}",
        "explanation": "the question's explanation",
        "title": "the question's wording",
        "id": "identifier of the question; not in the spec, kept when the platform sends it so that answers join "
        "on question_id",
        "allowedAttempts": "how many attempts the question allows",
        "choicesOrderType": "order the choices are shown in: ordered or random",
        "choices": "the choices, as JSON: [{title, good (whether it is a right answer), choiceAnswer, value}]",
    },
    m.Certificate: {
        "_id": "identifier of this badge/certificate instance; repeated deliveries are deduplicated on it",
        "_userId": "the user who earned it",
        "_ownerId": "the organisation: the owner account",
        "_badgeId": "the badge definition",
        "creationDate": "when the user completed the requirements; an expiry keeps this completion date",
        "expires": "when the certificate expires; null when it does not",
        "disabled": "whether the certificate is disabled or revoked",
        "expiryReminderSent": "whether an expiry reminder was sent",
        "_lessonActiveIds": "the active lessons (progress records) that validated it: answers.active_lesson_id values",
        "ruleData.type": "type of the badge rule; its values are not specified",
        "ruleData.name": "name of the badge rule",
        "ruleData.description": "description of the badge rule",
        "ruleData.validityDurationDays": "how long the certificate stays valid, set by the badge rule, in days",
        "createdAt": "when the certificate record was created",
        "updatedAt": "when the certificate record last changed; the latest wins in lms.certificates",
        "__v": "the record's version counter; may be absent",
    },
}

# Columns that are not an API field of the table's record, by name (the same meaning in every table).
NOTES = {
    "extra": "fields the spec does not know yet, as JSON keyed by their dotted API path (null when none)",
    "value_number": "the result's value when it is a number: the number answered or a choice, per type "
    "(API field AnswerResult.value)",
    "value_text": "the result's value when it is a string: text, an image in base 64 or a choice, per type "
    "(API field AnswerResult.value)",
    "result_index": "position of the result in Answer.results",
    "session_id": "LessonSession.id of the session",
    "group_id": "UserGroup.id of the group",
    "notion_index": "position of the notion in Lesson.notions",
    "notion_title": "title of the notion (API field LessonNotion.title)",
    "quiz": "entry (entryQuizz) or exit (exitQuizz)",
    "quizz_type": "kind of quiz: question-list, evaluation, life, survey, diagnostic, game, iterative or useCase "
    "(API field LessonQuizz.type)",
    "quizz_life_number": "number of lives the quiz gives; semantics not specified (API field LessonQuizz.lifeNumber)",
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
    "last_loaded_at": "when a load last wrote this row: inserted or changed it (a row read again unchanged is not "
    "written)",
    "deleted_at": "when the row vanished from a complete pull of its source (null = present)",
}
# A complete snapshot writes only the rows it changes: when it saw the others is in its load record.
SNAPSHOT_LOAD_COLUMNS = {
    "last_loaded_at": "when a load last wrote this row: inserted, changed or revived it; a complete pull sees every "
    "live row without writing it: lms._snapshot_seen says when",
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
    ANSWER_VERSIONS_TABLE: {
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
    "group_members": {"user_id": "the member (User.id)"},
    "lesson_questions": {"lesson_id": "the lesson (Lesson.id)"},
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
        meanings = MEANINGS.get(model, {})
        described = {
            f.name: (
                api_field_description(paths[f.name], meanings.get(paths[f.name], ""))
                if f.name in paths
                else NOTES.get(f.name) or parents.get(f.name, "")
            )
            for f in spec.schema
        }
    # a column the platform began sending says so itself (contract/evolution.py), once its load is known
    for f in spec.schema:
        if f.metadata and DESCRIPTION_METADATA in f.metadata:
            described[f.name] = f.metadata[DESCRIPTION_METADATA].decode()
    loaded = LOAD_COLUMNS | (SNAPSHOT_LOAD_COLUMNS if spec.kind == "snapshot" else {})
    return {name: text for name, text in described.items() if text} | loaded


def api_field_description(path: str, meaning: str) -> str:
    """`meaning (API field path)`, or only the field's name when nobody wrote its meaning (a test finds those)."""
    return f"{meaning} (API field {path})" if meaning else f"API field {path}"


def undocumented_columns() -> list[str]:
    """`table.column` of every data column without a description (a test keeps this empty)."""
    return [
        f"{spec.name}.{f.name}"
        for spec in TABLES.values()
        for f in spec.schema
        if f.name not in column_descriptions(spec)
    ]
