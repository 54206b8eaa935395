"""Inbox events -> Arrow, in the layouts of lms.certificate_events and lms.certificates (declared in
pipeline/contract/tables.py).

Payload columns follow the naming rule of the models: API field in snake_case without leading underscores,
nested objects prefixed with their parent (`ruleData.name` -> `rule_data_name`), date-times as TIMESTAMPTZ,
and fields the spec does not know kept as JSON in `extra`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.contract.models import Certificate
from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES
from pipeline.webhooks.events import EXPIRED, PayloadError, as_utc, parse_certificate
from pipeline.webhooks.inbox_backend import InboxEvent


class InboxEventError(ValueError):
    """A stored event no longer validates (the model changed since it was received, or it was received by a
    receiver that did not refuse it); `field` names where."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def event_row(event: InboxEvent, inbox_id: str) -> dict[str, object]:
    try:
        document, certificate = parse_certificate(event.payload)
    except PayloadError as exc:
        raise InboxEventError(
            f"inbox event {event.sequence} (certificate {event.certificate_id!r}) no longer validates: {exc}",
            exc.field,
        ) from None
    return {
        "event_id": event.dedupe_key,
        "event_type": event.event_type,
        "received_at": as_utc(event.received_at),
        "source": event.source,
        "inbox_id": inbox_id,
        "sequence": event.sequence,
        **payload_row(document, certificate),
    }


def events_to_arrow(events: Sequence[InboxEvent], inbox_id: str) -> pa.Table:
    """Column-wise build so that pyarrow converts each column once."""
    return _table([event_row(event, inbox_id) for event in events])


def _table(rows: Sequence[dict[str, object]]) -> pa.Table:
    schema = CERTIFICATE_EVENTS.schema
    columns: dict[str, list[object]] = {name: [] for name in schema.names}
    for row in rows:
        for name, value in row.items():
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=schema)


def events_to_arrow_isolating(
    events: Sequence[InboxEvent], inbox_id: str
) -> tuple[pa.Table, list[tuple[InboxEvent, str, str]]]:
    """events_to_arrow, keeping out the events that cannot become a row: (table of the others, [(event,
    field, error)]). A failing conversion of the whole chunk is retried event by event to find its culprits."""
    failed: list[tuple[InboxEvent, str, str]] = []
    rows: list[tuple[InboxEvent, dict[str, object]]] = []
    for event in events:
        try:
            rows.append((event, event_row(event, inbox_id)))
        except InboxEventError as exc:
            failed.append((event, exc.field, str(exc)))
        except Exception as exc:  # noqa: BLE001 - any event that cannot be read is set aside, not the whole load
            failed.append((event, "payload", f"{type(exc).__name__}: {exc}"))
    try:
        return _table([row for _, row in rows]), failed
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        kept = []
        for event, row in rows:
            try:
                _table([row])
                kept.append(row)
            except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:
                failed.append((event, "payload", f"cannot become a row of {CERTIFICATE_EVENTS.name}: {exc}"))
        return _table(kept), sorted(failed, key=lambda f: f[0].sequence)


def current_state_rows(events: pa.Table) -> pa.Table:
    """One lms.certificates row per event (certificate_events layout in): its payload and the state it sets.
    Which row wins for a certificate is the table's order_by (updatedAt, then expired over completed, then
    the later receipt), applied by the warehouse within the load and against the stored row alike."""
    expired = pc.equal(events.column("event_type"), EXPIRED)
    derived = {
        "state": pc.if_else(expired, "expired", "completed"),
        "last_event_id": events.column("event_id"),
        "last_event_type": events.column("event_type"),
        "last_received_at": events.column("received_at"),
    }
    columns = [derived[name] if name in derived else events.column(name) for name in CERTIFICATES.schema.names]
    return pa.Table.from_arrays(columns, schema=CERTIFICATES.schema)


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
