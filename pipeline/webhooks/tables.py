"""The two certificate tables of the warehouse (schema `lms`), declared as TableSpecs like every other
table, and how an inbox event becomes a row.

Payload columns follow the naming rule of the models: API field in snake_case without leading
underscores, nested objects prefixed with their parent (`ruleData.name` -> `rule_data_name`),
date-times as TIMESTAMPTZ, and fields the spec does not know kept as JSON in `extra`."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from pipeline.contract.models import Certificate
from pipeline.contract.tables import TableSpec
from pipeline.webhooks.events import as_utc

TIMESTAMP = pa.timestamp("us", tz="UTC")
JSON_FIELD = {b"json": b"1"}

PAYLOAD_FIELDS = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("user_id", pa.string()),
    pa.field("owner_id", pa.string()),
    pa.field("badge_id", pa.string()),
    pa.field("creation_date", TIMESTAMP),
    pa.field("expires", TIMESTAMP),
    pa.field("disabled", pa.bool_()),
    pa.field("expiry_reminder_sent", pa.bool_()),
    pa.field("lesson_active_ids", pa.list_(pa.string())),
    pa.field("rule_data_type", pa.string()),
    pa.field("rule_data_name", pa.string()),
    pa.field("rule_data_description", pa.string()),
    pa.field("rule_data_validity_duration_days", pa.float64()),
    pa.field("created_at", TIMESTAMP),
    pa.field("updated_at", TIMESTAMP),
    pa.field("v", pa.float64()),
    pa.field("extra", pa.string(), metadata=JSON_FIELD),
]
EVENT_FIELDS = [
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("event_type", pa.string(), nullable=False),
    pa.field("received_at", TIMESTAMP, nullable=False),
    pa.field("source", pa.string()),
    pa.field("inbox_id", pa.string(), nullable=False),
    pa.field("sequence", pa.int64(), nullable=False),
]
STATE_FIELDS = [
    pa.field("state", pa.string(), nullable=False),
    pa.field("last_event_id", pa.string(), nullable=False),
    pa.field("last_event_type", pa.string(), nullable=False),
    pa.field("last_received_at", TIMESTAMP, nullable=False),
]

CERTIFICATE_EVENTS = TableSpec(
    name="certificate_events",
    schema=pa.schema(EVENT_FIELDS + PAYLOAD_FIELDS),
    key=("event_id",),
    kind="append",
    description="Every distinct certificate webhook delivery (completed or expired), in inbox order.",
)
CERTIFICATES = TableSpec(
    name="certificates",
    schema=pa.schema(PAYLOAD_FIELDS + STATE_FIELDS),
    key=("id",),
    kind="incremental",
    cursor_field="updated_at",
    description="Current state of each certificate: the latest updatedAt wins; expired beats completed on ties.",
)

_MODEL_ALIASES = {info.alias or name for name, info in Certificate.model_fields.items()}


def _extra(document: dict[str, Any], certificate: Certificate) -> str | None:
    """Unknown fields in API spelling; unknown ruleData fields nested under "ruleData"."""
    extra = {key: value for key, value in document.items() if key not in _MODEL_ALIASES}
    if certificate.rule_data is not None and certificate.rule_data.model_extra:
        extra["ruleData"] = dict(certificate.rule_data.model_extra)
    return orjson.dumps(extra, option=orjson.OPT_SORT_KEYS).decode() if extra else None


def payload_row(document: dict[str, Any], certificate: Certificate) -> dict[str, Any]:
    """The payload columns of one validated Certificate."""
    rule = certificate.rule_data
    return {
        "id": certificate.id,
        "user_id": certificate.user_id,
        "owner_id": certificate.owner_id,
        "badge_id": certificate.badge_id,
        "creation_date": _ts(certificate.creation_date),
        "expires": _ts(certificate.expires),
        "disabled": certificate.disabled,
        "expiry_reminder_sent": certificate.expiry_reminder_sent,
        "lesson_active_ids": certificate.lesson_active_ids,
        "rule_data_type": rule.type if rule else None,
        "rule_data_name": rule.name if rule else None,
        "rule_data_description": rule.description if rule else None,
        "rule_data_validity_duration_days": _float(rule.validity_duration_days) if rule else None,
        "created_at": _ts(certificate.created_at),
        "updated_at": _ts(certificate.updated_at),
        "v": _float(certificate.v),
        "extra": _extra(document, certificate),
    }


def _ts(value: Any) -> Any:
    return None if value is None else as_utc(value)


def _float(value: float | int | None) -> float | None:
    return None if value is None else float(value)
