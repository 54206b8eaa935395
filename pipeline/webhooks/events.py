"""From an HTTP body to an inbox event: validation with the Certificate model, event-type inference and
the deduplication key.

The payload names no event type (spec, Events rule 4), so it is inferred at receipt: `expires` in the
past -> certificate_expired, else certificate_completed. The deduplication key hashes the canonical
payload together with that type, so an identical redelivery is stored once while the completion and the
expiry of one certificate `_id` stay two events.

At receipt a body is judged more strictly than the loader reads a stored one (`judge_certificate`): every
date-time must be an ISO 8601 string (the spec's type; the model alone would also take epoch numbers) that
stays within 0001..9999 once converted to UTC, and JSON may nest at most MAX_NESTING levels. What the
receiver refuses is answered 400 naming the field, so no event the loader cannot read enters the inbox."""

from __future__ import annotations

import hashlib
import re
import typing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ValidationError

from pipeline.contract.columns import OVERFLOW_MESSAGE, strip_optional, utc_overflows
from pipeline.contract.models import Certificate

EventType = Literal["certificate_completed", "certificate_expired"]
COMPLETED: EventType = "certificate_completed"
EXPIRED: EventType = "certificate_expired"
MAX_REPORTED_ERRORS = 5
# A certificate nests 3 levels; the bound keeps every payload serializable (orjson writes at most 254 levels).
MAX_NESTING = 32
DATE_FIELDS = tuple(
    info.alias or name for name, info in Certificate.model_fields.items() if datetime in strip_optional(info.annotation)
)
_ISO_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


class PayloadError(ValueError):
    """The body is not a valid Certificate payload; `field` names where (API spelling, dotted path),
    `message` says what is wrong and names the field too."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Delivery:
    """An accepted delivery, as the inbox stores it. `payload` is the body exactly as received."""

    dedupe_key: str
    certificate_id: str
    event_type: EventType
    received_at: datetime
    source: str | None
    payload: bytes


@dataclass(frozen=True)
class Rejected:
    """A delivery answered with 4xx after authentication, kept raw in the quarantine with the reason."""

    received_at: datetime
    source: str | None
    content_type: str | None
    status: int
    reason: str
    body: bytes | None


def as_utc(moment: datetime) -> datetime:
    """Date-times without an offset are taken as UTC (the platform's instants are UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def infer_event_type(expires: datetime | None, reference_at: datetime) -> EventType:
    """Expired when `expires` is not after the reference instant (receipt, or the sender's clock)."""
    if expires is not None and as_utc(expires) <= reference_at:
        return EXPIRED
    return COMPLETED


def dedupe_key(document: dict[str, Any], event_type: EventType) -> str:
    """sha256 over the event type and the payload with sorted keys: formatting and key order of a
    redelivery do not matter, any changed value does."""
    canonical = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(event_type.encode() + b"\n" + canonical).hexdigest()


def judge_certificate(body: bytes) -> tuple[dict[str, Any], Certificate]:
    """parse_certificate plus the checks of receipt (module docstring); PayloadError names the field."""
    document, certificate = parse_certificate(body)
    _check_nesting(document)
    for field in DATE_FIELDS:
        value = document.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise PayloadError(
                field, f"{field}: must be an ISO 8601 date-time string, not a JSON {_json_type(value)} ({value!r:.40})"
            )
        if not _ISO_DATE_TIME.match(value):
            raise PayloadError(field, f"{field}: {value!r:.60} is not an ISO 8601 date-time (YYYY-MM-DDTHH:MM...)")
    return document, certificate


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}.get(type(value), "value")


def _check_nesting(document: dict[str, Any]) -> None:
    """PayloadError naming the first path nested deeper than MAX_NESTING (walked without recursion)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        if len(path) >= MAX_NESTING:
            field = ".".join(path[:3]) + ("..." if len(path) > 3 else "")
            raise PayloadError(path[0], f"{field}: JSON nested deeper than {MAX_NESTING} levels")
        if isinstance(node, dict):
            stack.extend((value, (*path, str(key))) for key, value in node.items() if isinstance(value, (dict, list)))
        elif isinstance(node, list):
            stack.extend((value, (*path, str(i))) for i, value in enumerate(node) if isinstance(value, (dict, list)))


def parse_certificate(body: bytes) -> tuple[dict[str, Any], Certificate]:
    """The JSON document and its validated model, or PayloadError naming the first bad fields. Date-times that
    overflow once converted to UTC are bad fields too (nothing could store them)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadError("body", f"body is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise PayloadError("body", f"body must be a JSON object (a Certificate), not {type(document).__name__}")
    try:
        certificate = Certificate.model_validate(document)
    except ValidationError as exc:
        raise _first_fields(exc) from None
    if not certificate.id.strip():
        raise PayloadError("_id", "_id must be a non-empty string (it identifies the certificate)")
    for field in DATE_FIELDS:
        value = getattr(certificate, _ATTRIBUTES[field])
        if utc_overflows(value):
            raise PayloadError(field, f"{field}: {OVERFLOW_MESSAGE} (got {document.get(field)!r:.60})")
    return document, certificate


_ATTRIBUTES = {info.alias or name: name for name, info in Certificate.model_fields.items()}


def _first_fields(exc: ValidationError) -> PayloadError:
    """One message per bad field (a union reports each member it tried; they are merged)."""
    by_field: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False, include_input=False):
        by_field.setdefault(_field_path(error["loc"]), []).append(error["msg"])
    shown = [f"{name}: {' / '.join(dict.fromkeys(messages))}" for name, messages in by_field.items()]
    if len(shown) > MAX_REPORTED_ERRORS:
        shown = [*shown[:MAX_REPORTED_ERRORS], f"and {len(shown) - MAX_REPORTED_ERRORS} more"]
    return PayloadError(next(iter(by_field)), "; ".join(shown))


def _field_path(loc: tuple[int | str, ...]) -> str:
    """The API path of an error location, without the union member tags pydantic appends (`.float`)."""
    parts: list[str] = []
    model: type[BaseModel] | None = Certificate
    for part in loc:
        if isinstance(part, int):  # a list index
            parts.append(str(part))
            continue
        fields = {info.alias or name: info for name, info in model.model_fields.items()} if model else {}
        if part not in fields:
            break
        parts.append(part)
        model = _nested_model(fields[part].annotation)
    return ".".join(parts) or "body"


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def to_delivery(
    body: bytes,
    received_at: datetime,
    source: str | None,
    *,
    reference_at: datetime | None = None,
    declared_type: EventType | None = None,
) -> Delivery:
    """Validate the body and build the inbox event; raises PayloadError for a bad payload. The type is
    `declared_type` if the sender named it, else inferred against `reference_at` (default: receipt)."""
    document, certificate = judge_certificate(body)
    event_type = declared_type or infer_event_type(certificate.expires, reference_at or received_at)
    return Delivery(
        dedupe_key=dedupe_key(document, event_type),
        certificate_id=certificate.id,
        event_type=event_type,
        received_at=received_at,
        source=source,
        payload=body,
    )
