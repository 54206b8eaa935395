"""Pydantic models for every schema of the platform API (shared/platform-api.md).

Conventions, so that the warehouse contract follows from the models:

- Python field names are the API names in snake_case with leading underscores dropped; the API name is
  the alias (`_userId` -> `user_id`). Column names in DuckDB are these field names, nested objects
  flattened with the parent name as prefix (`stats.progressInPercent` -> `stats_progress_in_percent`).
- Records are validated strictly: a string where a number is expected, or a value outside an enumeration,
  is an error reported with its field, never silently coerced. Date-times are parsed from ISO 8601 text.
- Unknown fields the platform adds later are kept (`extra="allow"`, see `model_extra`).
- Enumerations are `Literal` aliases named after the spec so strict validation accepts their plain strings.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

# Date-times arrive as ISO 8601 strings; parsing them is not coercion of a wrong type.
Timestamp = Annotated[datetime, Field(strict=False)]
Number = float | int

ActiveLessonStatus = Literal["not-started", "in-progress", "succeeded", "failed"]
QuizType = Literal["exit", "entry"]
AnswerResultType = Literal["text", "image-base-64", "number", "choice-ref"]
FeedbackStatus = Literal["pending", "valid", "invalid"]
ForcedValidationType = Literal["admin", "coach"]
LessonSessionStatus = Literal["draft", "online", "cancelled", "deleted"]
QuotaType = Literal["none", "max", "min", "min-max"]
SessionCodeType = Literal["qr", "barcode", "access"]
RegistrationStatus = Literal["waiting-list", "pending-validation", "approved", "rejected"]
Attendance = Literal["attended", "absent", "none"]
LessonSessionType = Literal["fixed-date", "open"]
RegistrationGroupType = Literal["unlimited", "one-per-lesson"]  # deprecated in the spec, still required
LessonStatus = Literal["saved", "submit", "online", "refused", "deleted", "draft"]
LessonVisibility = Literal["public", "private"]
PlayMode = Literal["standard", "battle", "adaptive"]
LessonLevel = Literal["beginning", "intermediary", "expert"]
ImageType = Literal["original", "site", "site-low-res", "mobile", "small", "tiny", "specific"]
NotionContentType = Literal["standard", "flashCards", "video", "infographic"]
QuizzType = Literal["question-list", "evaluation", "life", "survey", "diagnostic", "game", "iterative", "useCase"]
QuestionType = Literal[
    "simple",
    "swipecards",
    "image-map",
    "label-matching",
    "multiple",
    "truefalse",
    "checkbox",
    "order",
    "gap-fill",
    "satisfaction",
    "evaluation",
    "free-text",
    "free-text-image-b64",
    "free-number",
]
ChoicesOrderType = Literal["ordered", "random"]
HistoryDestinationType = Literal[
    "lesson",
    "tips",
    "flux",
    "manager-user-deactivation",
    "manager-multiple-users-deactivation",
    "memorize",
    "track",
    "ranking",
    "default",
    "merge",
    "author-discussion",
    "discussion-mention",
    "discussion-timeline-comment",
    "discussion-lesson-comment",
    "new-discussion-lesson",
    "new-discussion-coaching",
    "new-discussion-feed",
    "new-discussion-lesson-content",
    "new-discussion-tips",
    "new-discussion-timeline",
    "add-author",
    "invite-user-to-join-platform",
    "send-free-email",
    "added-as-manager",
    "create-milestone",
    "evaluate-milestone",
    "new-lessons",
    "added-to-lesson-session",
    "session-will-start",
    "manager-user-request-reactivation",
    "manager-user-request-password-change",
]


class ApiModel(BaseModel):
    """Base of every platform record: strict types, aliases for API names, unknown fields kept."""

    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class ClosedModel(ApiModel):
    """Schemas the spec marks with 'no other properties'."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)


# --- Progress -------------------------------------------------------------------------------------


class LessonActiveStats(ApiModel):
    progress_in_percent: Number | None = Field(None, alias="progressInPercent")
    nb_incorrect_answers: Number | None = Field(None, alias="nbIncorrectAnswers")
    nb_correct_answers: Number | None = Field(None, alias="nbCorrectAnswers")
    success: bool | None = None
    validation_threshold: Number | None = Field(None, alias="validationThreshold")


class ActiveLesson(ApiModel):
    """Progress of one user on one lesson. No id: the natural key is (owner_id, user_id, lesson_id)."""

    stats: LessonActiveStats | None = None
    version: Number | None = None
    success_rate: Number | None = Field(None, alias="successRate")
    score: Number | None = None
    owner_id: str | None = Field(None, alias="_ownerId")
    user_id: str | None = Field(None, alias="_userId")
    lesson_id: str | None = Field(None, alias="_lessonId")
    time_spent: Number | None = Field(None, alias="timeSpent")
    achieved: bool | None = None
    last_date: Timestamp | None = Field(None, alias="lastDate")
    start_date: Timestamp | None = Field(None, alias="startDate")
    title: str | None = None


class AnswerResultPosition(ApiModel):
    left: Number | None = None
    top: Number | None = None


class AnswerResult(ApiModel):
    position: AnswerResultPosition | None = None
    label_name: str | None = Field(None, alias="labelName")
    value: Number | str | None = None
    type: AnswerResultType | None = None


class AnswerFeedback(ApiModel):
    status: FeedbackStatus | None = None
    title: str | None = None


class AnswerValidation(ApiModel):
    feedback: AnswerFeedback | None = None
    forced_validation_type: ForcedValidationType | None = Field(None, alias="forcedValidationType")
    is_forced_valid: bool | None = Field(None, alias="isForcedValid")


class Answer(ApiModel):
    """One answer to one question.

    No id: the natural key is (active_lesson_id, quiz_type, attempt_index, question_id), which stays
    unique across archived attempts (attempt_index) and entry/exit quizzes (quiz_type).
    """

    results: list[AnswerResult]
    attempt_index: Number = Field(alias="attemptIndex")
    quiz_type: QuizType = Field(alias="quizType")
    active_lesson_id: str = Field(alias="_activeLessonId")
    lesson_id: str = Field(alias="_lessonId")
    user_id: str = Field(alias="_userId")
    question_id: str | None = Field(None, alias="_questionId")
    question_title: str | None = Field(None, alias="questionTitle")
    lesson_version: Number | None = Field(None, alias="lessonVersion")
    last_date: Timestamp | None = Field(None, alias="lastDate")
    start_time_stamp: Number | None = Field(None, alias="startTimeStamp")
    end_time_stamp: Number | None = Field(None, alias="endTimeStamp")
    is_valid: bool | None = Field(None, alias="isValid")
    validation: AnswerValidation | None = None


# --- Errors, tokens, callbacks ----------------------------------------------------------------------


class DomainErrorModel(ApiModel):
    status_code: Number = Field(alias="statusCode")
    kind: str
    message: str


class ExchangeCredentialsForTokenBody(ApiModel):
    app_secret: str = Field(alias="appSecret")


class RefreshTokenBody(ApiModel):
    refresh_token: str = Field(alias="refreshToken")


class TokenResponse(ApiModel):
    access_token: str
    refresh_token: str

    def __repr__(self) -> str:  # tokens never reach logs through a repr
        return "TokenResponse(access_token='***', refresh_token='***')"

    __str__ = __repr__


class LogoutByIdBody(ApiModel):
    id: str


class UpdateActiveLessonBody(ApiModel):
    status: ActiveLessonStatus
    progress: int = Field(ge=0, le=100)
    score: int | None = Field(None, ge=0, le=100)


class ActiveLessonCallback(ApiModel):
    progress: Number
    status: ActiveLessonStatus
    lesson_id: str = Field(alias="LessonID")
    user_id: str = Field(alias="UserID")
    score: Number | None = None
    absolute_score: Number | None = Field(None, alias="absoluteScore")


# --- Directory ----------------------------------------------------------------------------------


class Category(ApiModel):
    name: str
    owner_id: str = Field(alias="ownerID")
    id: str
    description: str | None = None


class UserGroup(ApiModel):
    title: str
    id: str
    unique_name: str | None = Field(None, alias="uniqueName")
    description: str | None = None
    type: str | None = None
    disabled: bool | None = None
    nb_user: Number | None = Field(None, alias="nbUser")
    nb_active_user: Number | None = Field(None, alias="nbActiveUser")


class User(ApiModel):
    locale: str
    points: Number
    login: str
    email: str
    firstname: str
    lastname: str
    alias: str
    id: str


# --- Lesson sessions --------------------------------------------------------------------------------


class LessonSessionQuota(ClosedModel):
    type: QuotaType
    min: Number | None = None
    max: Number | None = None


class LessonSessionCode(ClosedModel):
    type: SessionCodeType | None = None
    value: str | None = None


class I18nText(ApiModel):
    lang: str | None = None
    value: str | None = None


class LessonSessionLocation(ClosedModel):
    lang: str | None = None
    name: str | None = None
    room: str | None = None
    description: str | None = None
    address: str | None = None
    name_i18n: list[I18nText] | None = None
    description_i18n: list[I18nText] | None = None


class LessonSessionRegistration(ApiModel):
    user_id: str = Field(alias="userId")
    status: RegistrationStatus
    signature_date: Timestamp | None = Field(alias="signatureDate")
    registration_date: Timestamp | None = Field(None, alias="registrationDate")
    attendance: Attendance | None = None


class LessonSession(ApiModel):
    """A lesson session as the API returns it: every field present, nullable ones may be null."""

    id: str
    guid: str | None
    title: str | None
    description: str | None
    lesson_id: str | None = Field(alias="lessonId")
    creator_id: str | None = Field(alias="creatorId")
    status: LessonSessionStatus | None
    quotas: LessonSessionQuota | None
    start_date: Timestamp | None = Field(alias="startDate")
    end_date: Timestamp | None = Field(alias="endDate")
    creation_date: Timestamp | None = Field(alias="creationDate")
    presenters: list[str]
    codes: list[LessonSessionCode] | None
    location: LessonSessionLocation | None
    on_site: bool = Field(alias="onSite")
    is_live: bool = Field(alias="isLive")
    registrations: list[LessonSessionRegistration]


class RegistrationsPeriod(ApiModel):
    start_date: Timestamp | None = Field(None, alias="startDate")
    end_date: Timestamp | None = Field(None, alias="endDate")


class SessionBodyLocation(ApiModel):
    room: str | None = None
    name: str | None = None


class LessonSessionBody(ApiModel):
    """Create request for a lesson session."""

    title: str
    description: str
    lesson_id: str = Field(alias="lessonId")
    presenters: list[str]
    status: LessonSessionStatus
    type: LessonSessionType
    registration_group_type: RegistrationGroupType = Field(alias="registrationGroupType")
    quota: LessonSessionQuota | None = None
    registrations_period: RegistrationsPeriod | None = Field(None, alias="registrationsPeriod")
    location: SessionBodyLocation | None = None
    start_date: str | None = Field(None, alias="startDate")
    end_date: str | None = Field(None, alias="endDate")
    is_attendance_session: bool | None = Field(None, alias="isAttendanceSession")
    is_signed_session: bool | None = Field(None, alias="isSignedSession")
    has_live: bool | None = Field(None, alias="hasLive")
    onsite: bool | None = None
    codes: list[LessonSessionCode] | None = None


def _every_field_optional(model: type[ApiModel], name: str, doc: str) -> type[ApiModel]:
    annotations: dict[str, Any] = {name: info.annotation for name, info in model.model_fields.items()}  # type forms
    fields: dict[str, Any] = {
        field_name: (annotations[field_name] | None, Field(None, alias=info.alias))
        for field_name, info in model.model_fields.items()
    }
    return create_model(name, __base__=ApiModel, __doc__=doc, __module__=__name__, **fields)


LessonSessionUpdateBody = _every_field_optional(
    LessonSessionBody, "LessonSessionUpdateBody", "Update request: the create body's properties, every one optional."
)


# --- Catalogue --------------------------------------------------------------------------------------


class LessonImage(ApiModel):
    type: ImageType | None = None
    url: str | None = None


class FlashCardSide(ApiModel):
    text: str
    image: str | None = None
    images: list[LessonImage] | None = None


class FlashCard(ApiModel):
    front_content: FlashCardSide = Field(alias="frontContent")
    back_content: FlashCardSide = Field(alias="backContent")


class VideoContent(ApiModel):
    url: str
    thumbnail: str | None = None


class LessonNotionContent(ApiModel):
    type: NotionContentType
    name: str
    duration: Number | None = None
    standard_content: str | None = Field(None, alias="standardContent")
    icons: list[LessonImage] | None = None
    video_content: VideoContent | None = Field(None, alias="videoContent")
    flash_card_content: list[FlashCard] | None = Field(None, alias="flashCardContent")


class QuestionChoice(ApiModel):
    title: str | None = None
    good: bool | None = None
    choice_answer: str | None = Field(None, alias="choiceAnswer")
    value: Number | None = None


class LessonQuizzQuestion(ApiModel):
    type: QuestionType
    explanation: str
    title: str
    id: str | None = None  # not in the spec; carried when present so answers can join questions
    allowed_attempts: Number | None = Field(None, alias="allowedAttempts")
    choices_order_type: ChoicesOrderType | None = Field(None, alias="choicesOrderType")
    choices: list[QuestionChoice] | None = None


class LessonQuizz(ApiModel):
    type: QuizzType | None = None
    life_number: Number | None = Field(None, alias="lifeNumber")
    questions: list[LessonQuizzQuestion] | None = None


class LessonNotion(ApiModel):
    contents: list[LessonNotionContent]
    description: str
    title: str
    icons_preview: list[LessonImage] | None = Field(None, alias="iconsPreview")
    entry_quizz: LessonQuizz | None = Field(None, alias="entryQuizz")
    exit_quizz: LessonQuizz | None = Field(None, alias="exitQuizz")


class Lesson(ApiModel):
    status: LessonStatus
    visibility: LessonVisibility
    summary: str
    title: str
    id: str | None = None
    play_mode: PlayMode = Field("standard", alias="playMode")
    category_ids: list[str] | None = Field(None, alias="categoryIds")
    track_ids: list[str] | None = Field(None, alias="trackIds")
    level: LessonLevel | None = None
    images: list[LessonImage] | None = None
    image: str | None = None
    notions: list[LessonNotion] | None = None


class Track(ApiModel):
    owner_id: str = Field(alias="ownerID")
    id: str
    title: str | None = None


class HistoryDestination(ApiModel):
    type: HistoryDestinationType | None = None
    sub_type: str | None = Field(None, alias="subType")
    destination_id: str | None = Field(None, alias="destinationId")
    user_group_id: str | None = Field(None, alias="userGroupId")


class UserHistory(ApiModel):
    destination: HistoryDestination | None
    creation_date: Timestamp | None = Field(alias="creationDate")
    body: str
    title: str
    id: str
    seen: bool | None = None


# --- Certificates (webhook payload) ----------------------------------------------------------------


class CertificateRuleData(ApiModel):
    type: str | None = None
    name: str | None = None
    description: str | None = None
    validity_duration_days: Number | None = Field(None, alias="validityDurationDays")


class Certificate(ApiModel):
    """Webhook payload. The spec does not say which fields are required; only `_id` is needed to key it."""

    id: str = Field(alias="_id")
    user_id: str | None = Field(None, alias="_userId")
    owner_id: str | None = Field(None, alias="_ownerId")
    badge_id: str | None = Field(None, alias="_badgeId")
    creation_date: Timestamp | None = Field(None, alias="creationDate")
    expires: Timestamp | None = None
    disabled: bool | None = None
    expiry_reminder_sent: bool | None = Field(None, alias="expiryReminderSent")
    lesson_active_ids: list[str] | None = Field(None, alias="_lessonActiveIds")
    rule_data: CertificateRuleData | None = Field(None, alias="ruleData")
    created_at: Timestamp | None = Field(None, alias="createdAt")
    updated_at: Timestamp | None = Field(None, alias="updatedAt")
    v: Number | None = Field(None, alias="__v")


def api_dump(record: BaseModel) -> dict[str, Any]:
    """The record as the API spells it (aliases, ISO date-times, extras kept), for JSON bodies."""
    return record.model_dump(mode="json", by_alias=True, exclude_unset=True)
