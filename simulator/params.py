"""Query and path parameters, checked by hand so every bad value is a 400 naming the parameter (never a
422 or a 500). pageSize and pageNumber are strings in the spec; booleans accept true/false/1/0."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, unquote_to_bytes

from simulator.errors import DomainError
from simulator.timeutil import parse_instant

_INTEGER = re.compile(r"[+-]?\d+")
_TRUE, _FALSE = {"true", "1"}, {"false", "0"}
MAX_ID_LENGTH = 512


@dataclass(frozen=True)
class Page:
    offset: int
    size: int

    def slice(self, total: int) -> slice:
        start = min(self.offset, total)
        return slice(start, min(start + self.size, total))


def page(page_size: str | None, page_number: str | None, *, first_page: int, default_size: int, max_size: int) -> Page:
    size = default_size if page_size is None else _integer("pageSize", page_size)
    if not 1 <= size <= max_size:
        raise DomainError(400, f"pageSize={page_size!r} is out of range: use an integer from 1 to {max_size}")
    number = first_page if page_number is None else _integer("pageNumber", page_number)
    if number < first_page:
        raise DomainError(400, f"pageNumber={page_number!r} is below the first page: pages start at {first_page}")
    return Page((number - first_page) * size, size)


def _integer(name: str, text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise DomainError(400, f"{name}={text!r} is not an integer")
    if len(text.strip()) > 15:
        raise DomainError(400, f"{name}={text[:20]!r}... is too large")
    return int(text)


def flag(name: str, text: str | None, default: bool = False) -> bool:
    if text is None:
        return default
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise DomainError(400, f"{name}={text!r} is not a boolean: use true or false")


def since(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_instant(text, name="updatedSince")
    except (ValueError, OverflowError) as exc:
        raise DomainError(400, str(exc)) from None


def path_id(name: str, raw: str) -> str:
    """A path segment as the client meant it: routing sees the raw, still percent-encoded path (bytes
    decoded as latin-1), so `%2F` stays inside the segment; here it becomes UTF-8 text."""
    try:
        value = unquote_to_bytes(raw.encode("latin-1")).decode("utf-8")
    except UnicodeEncodeError:  # a server that gave no raw path: the segment is already text
        value = unquote(raw)
    except UnicodeDecodeError:
        raise DomainError(400, f"{name} {raw!r} is not valid percent-encoded UTF-8") from None
    if not value.strip() or len(value) > MAX_ID_LENGTH or any(ord(c) < 32 for c in value):
        raise DomainError(400, f"{name} {value!r} is not a valid identifier (empty, too long or control characters)")
    return value
