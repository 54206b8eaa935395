"""Quarantine rows: a record that broke its schema, kept raw with where it came from and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pipeline.source.pages import PageLocation


@dataclass(frozen=True)
class QuarantineRow:
    seen_at: datetime
    stream: str
    endpoint: str
    params: str  # JSON text
    page: int
    record_index: int
    field: str  # API path of the first offending field, e.g. "quizType" or "results.0.type"
    message: str
    raw: str  # the record as served, JSON text


def _path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(record)"


def _field_path(item: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of an error location that exists in the record (drops pydantic's union-branch tags)."""
    found: list[Any] = []
    for part in loc:
        if isinstance(item, dict) and part in item:
            item = item[part]
        elif isinstance(item, list) and isinstance(part, int) and 0 <= part < len(item):
            item = item[part]
        elif isinstance(item, dict) or part not in ("float", "int", "str", "bool"):
            found.append(part)  # a missing field, named by the error
            break
        else:
            break
        found.append(part)
    return tuple(found)


def _describe(errors: list[Mapping[str, Any]], item: Any) -> tuple[str, str]:
    """(first field path, one message for all errors) of a record, e.g. ("score", "score: Input should be
    a valid number or Input should be a valid integer (got 'high')")."""
    by_field: dict[str, list[Mapping[str, Any]]] = {}
    for error in errors:
        by_field.setdefault(_path(_field_path(item, tuple(error["loc"]))), []).append(error)
    parts = []
    for field, group in by_field.items():
        shown = group[0].get("input", ...)
        got = f" (got {shown!r:.60})" if shown is None or isinstance(shown, (str, int, float, bool)) else ""
        messages = list(dict.fromkeys(e["msg"] for e in group))
        parts.append(f"{field}: {' or '.join(messages)}{got}")
    return next(iter(by_field)), "; ".join(parts)


def quarantine_row(where: PageLocation, index: int, item: Any, errors: list[Mapping[str, Any]]) -> QuarantineRow:
    field, message = _describe(errors, item)
    return QuarantineRow(
        seen_at=datetime.now(UTC), stream=where.stream, endpoint=where.endpoint,
        params=orjson.dumps(dict(where.params)).decode(), page=where.page, record_index=index,
        field=field, message=message, raw=orjson.dumps(item, default=str).decode(),
    )
