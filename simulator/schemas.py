"""The platform's request and response shapes, written from the spec (`shared/platform-api.md`) for the
simulator alone: it imports nothing from the product, so a mistake in the client's models cannot be mirrored
here and go unseen by the tests that run the client against the simulator.

- Request bodies are pydantic models: FastAPI validates them (a bad body is the spec's 400) and the routes
  read them. Strict types: a string where the spec says number is refused, not coerced.
- Response shapes are TypedDicts: the routes build plain dicts (orjson, the hot path), and these only
  document them in /openapi.json, which schemathesis holds every response to. A field the spec does not list
  as required is left out of `required`, and it is nullable only where the spec says "nullable", so a `null`
  the spec does not allow fails that check.

Names are the spec's own (camelCase, leading underscores): compare each schema with the spec line by line.
"""

from __future__ import annotations

from datetime import datetime
from typing import (
    Annotated,
    Literal,
    NotRequired,  # pydantic needs typing_extensions' TypedDict on 3.11
)

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

# Request date-times arrive as ISO 8601 text: parsing them is not coercing a wrong type.
DateTimeText = Annotated[datetime, Field(strict=False)]
RequestNumber = int | float  # as sent: 12 stays 12 when echoed back in a session's quotas

ActiveLessonStatus = Literal["not-started", "in-progress", "succeeded", "failed"]
LessonSessionStatus = Literal["draft", "online", "cancelled", "deleted"]
QuotaType = Literal["none", "max", "min", "min-max"]
SessionCodeType = Literal["qr", "barcode", "access"]
ImageType = Literal["original", "site", "site-low-res", "mobile", "small", "tiny", "specific"]
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
QuizzType = Literal["question-list", "evaluation", "life", "survey", "diagnostic", "game", "iterative", "useCase"]


# --- Request bodies ---------------------------------------------------------------------------------


class RequestBody(BaseModel):
    """A JSON request body: strict types; properties the spec does not list are accepted and ignored."""

    model_config = ConfigDict(strict=True, extra="allow")


class ClosedRequestBody(RequestBody):
    """A schema the spec marks "no other properties"."""

    model_config = ConfigDict(strict=True, extra="forbid")


class ExchangeCredentialsForTokenBody(RequestBody):
    app_secret: str = Field(alias="appSecret")


class RefreshTokenBody(RequestBody):
    """The spec's `refreshTokenBody`."""

    refresh_token: str = Field(alias="refreshToken")


class LogoutByIdBody(RequestBody):
    id: str


class UpdateActiveLessonBody(RequestBody):
    status: ActiveLessonStatus
    progress: int = Field(ge=0, le=100)
    score: int | None = Field(None, ge=0, le=100)


class LessonSessionQuotaBody(ClosedRequestBody):
    """ILessonSessionQuota."""

    type: QuotaType
    min: RequestNumber | None = None
    max: RequestNumber | None = None


class LessonSessionCodeBody(ClosedRequestBody):
    """ILessonSessionCode."""

    type: SessionCodeType | None = None
    value: str | None = None


class RegistrationsPeriodBody(RequestBody):
    start_date: DateTimeText | None = Field(None, alias="startDate")
    end_date: DateTimeText | None = Field(None, alias="endDate")


class SessionLocationBody(RequestBody):
    """The create body's location: room and name only (the response's ILessonSessionLocation has more)."""

    room: str | None = None
    name: str | None = None


class LessonSessionUpdateBody(RequestBody):
    """PUT /v1/lesson-session/{ID}: the create body's properties, every one optional."""

    title: str | None = None
    description: str | None = None
    lesson_id: str | None = Field(None, alias="lessonId")
    presenters: list[str] | None = None
    status: LessonSessionStatus | None = None
    type: Literal["fixed-date", "open"] | None = None
    # the spec marks the enumeration deprecated, yet the create body still requires the property
    registration_group_type: Literal["unlimited", "one-per-lesson"] | None = Field(None, alias="registrationGroupType")
    quota: LessonSessionQuotaBody | None = None
    registrations_period: RegistrationsPeriodBody | None = Field(None, alias="registrationsPeriod")
    location: SessionLocationBody | None = None
    start_date: str | None = Field(None, alias="startDate")  # typed string, not date-time, in the spec
    end_date: str | None = Field(None, alias="endDate")
    is_attendance_session: bool | None = Field(None, alias="isAttendanceSession")
    is_signed_session: bool | None = Field(None, alias="isSignedSession")
    has_live: bool | None = Field(None, alias="hasLive")
    onsite: bool | None = None
    codes: list[LessonSessionCodeBody] | None = None


class LessonSessionBody(LessonSessionUpdateBody):
    """POST /v1/lesson-session (LessonSessionBody): the update body with the spec's required properties."""

    title: str
    description: str
    lesson_id: str = Field(alias="lessonId")
    presenters: list[str]
    status: LessonSessionStatus
    type: Literal["fixed-date", "open"]
    registration_group_type: Literal["unlimited", "one-per-lesson"] = Field(alias="registrationGroupType")


# --- Response shapes (documentation of the dicts the routes build) ---------------------------------


class DomainErrorModel(TypedDict):
    statusCode: float
    kind: str
    message: str


class TokenResponse(TypedDict):
    access_token: str
    refresh_token: str


class ActiveLessonCallback(TypedDict):
    progress: float
    status: ActiveLessonStatus
    LessonID: str
    UserID: str
    score: NotRequired[float]
    absoluteScore: NotRequired[float]


class LessonActiveStats(TypedDict, total=False):
    progressInPercent: float
    nbIncorrectAnswers: float
    nbCorrectAnswers: float
    success: bool
    validationThreshold: float


class ActiveLesson(TypedDict, total=False):
    """Progress of one user on one lesson; no field is required."""

    stats: LessonActiveStats
    version: float
    successRate: float
    score: float
    _ownerId: str
    _userId: str
    _lessonId: str
    timeSpent: float
    achieved: bool
    lastDate: datetime
    startDate: datetime
    title: str


class AnswerResultPosition(TypedDict, total=False):
    left: float
    top: float


class AnswerResult(TypedDict, total=False):
    position: AnswerResultPosition
    labelName: str
    value: float | str
    type: Literal["text", "image-base-64", "number", "choice-ref"]


class AnswerFeedback(TypedDict, total=False):
    status: Literal["pending", "valid", "invalid"]
    title: str


class AnswerValidation(TypedDict, total=False):
    feedback: AnswerFeedback
    forcedValidationType: Literal["admin", "coach"]
    isForcedValid: bool


class Answer(TypedDict):
    results: list[AnswerResult]
    attemptIndex: float
    quizType: Literal["exit", "entry"]
    _activeLessonId: str
    _lessonId: str
    _userId: str
    _questionId: NotRequired[str]
    questionTitle: NotRequired[str]
    lessonVersion: NotRequired[float]
    lastDate: NotRequired[datetime]
    startTimeStamp: NotRequired[float]
    endTimeStamp: NotRequired[float]
    isValid: NotRequired[bool]
    validation: NotRequired[AnswerValidation]


class Category(TypedDict):
    name: str
    ownerID: str
    id: str
    description: NotRequired[str]


class UserGroup(TypedDict):
    title: str
    id: str
    uniqueName: NotRequired[str]
    description: NotRequired[str]
    type: NotRequired[str]
    disabled: NotRequired[bool]
    nbUser: NotRequired[float]
    nbActiveUser: NotRequired[float]


class User(TypedDict):
    locale: str
    points: float
    login: str
    email: str
    firstname: str
    lastname: str
    alias: str
    id: str


class ILessonSessionQuota(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]  # "no other properties"

    type: QuotaType
    min: NotRequired[float]
    max: NotRequired[float]


class ILessonSessionCode(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    type: SessionCodeType
    value: str


class I18nText(TypedDict, total=False):
    lang: str
    value: str


class ILessonSessionLocation(TypedDict, total=False):
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    lang: str
    name: str
    room: str
    description: str
    address: str
    name_i18n: list[I18nText]
    description_i18n: list[I18nText]


class LessonSessionRegistrations(TypedDict):
    userId: str
    status: Literal["waiting-list", "pending-validation", "approved", "rejected"]
    signatureDate: datetime | None
    registrationDate: NotRequired[datetime]
    attendance: NotRequired[Literal["attended", "absent", "none"]]


class LessonSession(TypedDict):
    """Every field required; the nullable ones may be null."""

    id: str
    guid: str | None
    title: str | None
    description: str | None
    lessonId: str | None
    creatorId: str | None
    status: LessonSessionStatus | None
    quotas: ILessonSessionQuota | None
    startDate: datetime | None
    endDate: datetime | None
    creationDate: datetime | None
    presenters: list[str]
    codes: list[ILessonSessionCode] | None
    location: ILessonSessionLocation | None
    onSite: bool
    isLive: bool
    registrations: list[LessonSessionRegistrations]


class LessonImages(TypedDict, total=False):
    type: ImageType
    url: str


class VideoContent(TypedDict):
    url: str
    thumbnail: NotRequired[str]


class FlashCardSide(TypedDict):
    text: str
    image: NotRequired[str]
    images: NotRequired[list[LessonImages]]


class FlashCard(TypedDict):
    frontContent: FlashCardSide
    backContent: FlashCardSide


class LessonNotionContent(TypedDict):
    type: Literal["standard", "flashCards", "video", "infographic"]
    name: str
    duration: NotRequired[float]
    standardContent: NotRequired[str]  # markdown accepted
    icons: NotRequired[list[LessonImages]]
    videoContent: NotRequired[VideoContent]
    flashCardContent: NotRequired[list[FlashCard]]


class QuestionChoice(TypedDict, total=False):
    title: str
    good: bool
    choiceAnswer: str
    value: float


class LessonQuizzQuestion(TypedDict):
    type: QuestionType
    explanation: str
    title: str
    # Not in the spec: the simulator's questions carry the id that answers reference as `_questionId`.
    id: NotRequired[str]
    allowedAttempts: NotRequired[float]
    choicesOrderType: NotRequired[Literal["ordered", "random"]]
    choices: NotRequired[list[QuestionChoice]]


class LessonQuizz(TypedDict, total=False):
    type: QuizzType
    lifeNumber: float
    questions: list[LessonQuizzQuestion]


class LessonNotion(TypedDict):
    contents: list[LessonNotionContent]
    description: str
    title: str
    iconsPreview: NotRequired[list[LessonImages]]
    entryQuizz: NotRequired[LessonQuizz]
    exitQuizz: NotRequired[LessonQuizz]


class Lesson(TypedDict):
    status: Literal["saved", "submit", "online", "refused", "deleted", "draft"]
    visibility: Literal["public", "private"]
    summary: str
    title: str
    id: NotRequired[str]
    playMode: NotRequired[Annotated[Literal["standard", "battle", "adaptive"], Field(description="default standard")]]
    categoryIds: NotRequired[list[str]]
    trackIds: NotRequired[list[str]]
    level: NotRequired[Literal["beginning", "intermediary", "expert"]]
    images: NotRequired[list[LessonImages]]
    image: NotRequired[str]  # public URL
    notions: NotRequired[list[LessonNotion]]
