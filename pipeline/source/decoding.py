"""Decoding one page body into Arrow batches, the validated way (the fast way, when it applies, is
fast_decoding.py): the whole page validated in Rust first, record by record only if that fails, so a record that
breaks its schema, lacks a key field, holds a date-time outside 0001..9999 in UTC, or that the JSON parser or
Arrow refuses is quarantined (endpoint, page, field, message, raw JSON) and the rest of the page still loads. A
body that is not complete JSON raises TruncatedBody (the transport retries it). Out come one batch per table: the
page's own, its child tables', its quarantine rows (page_batches).

The validators are TypedDict validators derived from the pydantic models (same fields, aliases, types,
strictness, required/nullable rules): building model objects costs ~3x the JSON parse while the warehouse wants
columns, and the models stay the single source of truth (a test checks both accept and reject the same records).
`forbid_extras=True` rejects unknown fields (the fast path: no per-record extras scan), `False` keeps them for
`extra`; models the spec declares closed forbid them in both.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, NotRequired, Required, Union

import numpy as np
import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from pipeline.contract.columns import OVERFLOW_MESSAGE, is_model, strip_optional, utc_overflows
from pipeline.contract.streams import StreamSpec
from pipeline.contract.tables import BUILDS, QUARANTINE, TABLES, ChildTable, RecordTable, TableSpec, quarantine_batch
from pipeline.source.errors import PlatformResponseError, TruncatedBody
from pipeline.source.paging import Request

log = logging.getLogger("lessonsync.source")


@dataclass(frozen=True)
class PageLocation:
    stream: str
    endpoint: str  # the path as requested, percent-encoded
    page: int  # pageNumber sent; 0 for unpaginated operations
    params: Mapping[str, str]

    def __str__(self) -> str:
        return f"GET {self.endpoint} page {self.page}"


@dataclass
class DecodedPage:
    """A page as validated dicts (API names), before it becomes Arrow batches (arrow_page)."""

    location: PageLocation
    served: int  # records in the page as served, valid or not (drives short-page and coverage rules)
    records: list[Any]  # valid, keyed records: validated dicts with API names
    quarantined: list[QuarantineRow]
    with_extras: bool = False  # False: no record has an unknown field (no extras scan needed)
    positions: list[int] | None = None  # where each record sat in the page as served; None: in order, none left out


@dataclass(frozen=True)
class Batch:
    """Rows of one table from one page: what the client yields to the warehouse."""

    table: TableSpec
    records: pa.RecordBatch
    endpoint: str
    page: int


@dataclass
class Page:
    """A fetched page, already Arrow: the dicts are dropped as soon as it is converted, so pages waiting
    in flight or in order hold compact columns, not Python objects (memory stays flat at scale)."""

    location: PageLocation
    served: int  # records in the page as served, valid or not (drives short-page and coverage rules)
    batches: list[Batch]  # own table, then child tables, then quarantine; empty ones left out
    records: int = 0  # valid records (rows of the own table)
    quarantined: int = 0
    key_hashes: np.ndarray | None = None  # hashes of the records' keys (drift detection of record sweeps)
    own: pa.RecordBatch | None = None  # the own table's batch, for reading ids of sub-requests
    from_cache: bool = False  # read from the page cache (page_cache.py), not decoded
    # Only while a page with unknown fields waits for the schema step (source/evolution.py), which may quarantine a
    # record and keeps it as served: the body, and where each row's record sat in it (None: in order, none left out).
    body: bytes | None = None
    positions: list[int] | None = None


def record_key_fields(stream: StreamSpec) -> tuple[str, ...]:
    """The own table's key columns a record carries: what drift detection hashes, the same on every path (the
    validated dicts, the fast path's Structs, a page read back from page_cache.py)."""
    return tuple(k for k in TABLES[stream.table].key if k in stream.model.model_fields)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a page is decoded: a page makes thousands of short-lived
    containers (no cycles; reference counting frees them), each batch of 700 triggering a collection that walks
    the rest, and some of them a full collection of the whole process. That took as much CPU as the decoding
    itself on pages of several thousand records (fast path), and a third of the validated path's time on the
    lesson catalogue's pages. Within another
    pause, or while another thread's is on, the collector is left as it was found."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def arrow_page(request: Request, page: DecodedPage, key: Callable[[Any], Any] | None = None) -> Page:
    """Batches of a decoded page, plus key hashes when `key` (a getter on the dicts) is given. A valid record
    Arrow cannot convert does not stop the page: see set_aside_unconvertible."""
    try:
        batches = page_batches(request, page)
    except CONVERSION_ERRORS:
        set_aside_unconvertible(request, page)
        batches = page_batches(request, page)
    hashes = None
    if key is not None:
        hashes = np.fromiter((hash(key(r)) for r in page.records), dtype=np.int64, count=len(page.records))
    own = batches[0].records if page.records else None
    decoded = Page(page.location, page.served, batches, len(page.records), len(page.quarantined), hashes, own)
    decoded.positions = page.positions
    return decoded


def page_batches(request: Request, page: DecodedPage) -> list[Batch]:
    """The page's own table, then its child tables, then its quarantine rows; empty batches are left out.

    A child batch follows its parent batch from the same page, so a warehouse that replaces all children
    of every parent key in a parent batch deletes before it inserts (a parent whose list became empty
    has no child rows; its old ones must still go).
    """
    where, stream = page.location, request.stream
    batches: list[Batch] = []
    if page.records:
        table = BUILDS[stream.table]
        assert isinstance(table, RecordTable)
        parent = table.batch(page.records, with_extras=page.with_extras)
        batches.append(Batch(table.spec, parent, where.endpoint, where.page))
        for child_name, expand in stream.children:
            rows = expand(page.records, request.path_values)
            child = BUILDS[child_name]
            assert isinstance(child, ChildTable)
            if rows:
                records = child.batch(parent, rows, with_extras=page.with_extras)
                batches.append(Batch(child.spec, records, where.endpoint, where.page))
    if page.quarantined:
        batches.append(Batch(QUARANTINE, quarantine_batch(page.quarantined), where.endpoint, where.page))
    return batches


# Values the models accept that Arrow cannot convert as they are: integers beyond 2^53 in a number (double)
# column (Arrow refuses what a double cannot hold exactly; the spec's numbers are doubles, and the fast path
# reads them as the nearest double), and whatever else a conversion may refuse.
CONVERSION_ERRORS = (pa.ArrowException, OverflowError, ValueError, TypeError)
_EXACT_INTEGERS = 2**53


def set_aside_unconvertible(request: Request, page: DecodedPage) -> None:
    """Record by record: integers beyond 2^53 become the nearest double (as on the fast path); a record that
    still does not convert (e.g. an integer past the double range) is quarantined, its field named."""
    kept, positions = [], []
    for number, record in enumerate(page.records):
        index = number if page.positions is None else page.positions[number]
        widened, field = _doubles_for_huge_integers(record)
        if widened is not None:
            try:
                page_batches(request, DecodedPage(page.location, 1, [widened], [], with_extras=page.with_extras))
                kept.append(widened)
                positions.append(index)
                continue
            except CONVERSION_ERRORS as exc:
                error = f"cannot be converted to Arrow: {type(exc).__name__}: {exc}"
        else:
            error = "a number beyond the range of a double"
        quarantine_into(page, index, record, [{"loc": tuple(field or ()), "msg": error}])
    page.records, page.positions = kept, positions


class _BeyondDoubles(Exception):
    def __init__(self, path: list[Any]) -> None:
        self.path = path


def _doubles_for_huge_integers(record: Any) -> tuple[Any | None, list[Any] | None]:
    """(the record with every integer beyond 2^53 as the nearest double, or None when one exceeds the double
    range; the path of the first integer changed, or of the one beyond range)."""
    first: list[list[Any]] = []

    def widen(value: Any, path: list[Any]) -> Any:
        if isinstance(value, dict):
            return {k: widen(v, [*path, k]) for k, v in value.items()}
        if isinstance(value, list):
            return [widen(v, [*path, i]) for i, v in enumerate(value)]
        if value.__class__ is int and not -_EXACT_INTEGERS <= value <= _EXACT_INTEGERS:
            first.append(path)
            try:
                return float(value)
            except OverflowError:
                raise _BeyondDoubles(path) from None
        return value

    try:
        widened = widen(record, [])
    except _BeyondDoubles as beyond:
        return None, beyond.path
    return widened, first[0] if first else None


# Validators: plain dicts, validated in Rust by the models' rules

_cache: dict[tuple[type[BaseModel], bool], Any] = {}


def _translate(annotation: Any, forbid_extras: bool) -> Any:
    """`annotation` with every model replaced by its TypedDict."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return Annotated[(_translate(args[0], forbid_extras), *annotation.__metadata__)]
    if origin is typing.Union or origin is types.UnionType:
        return Union[tuple(_translate(a, forbid_extras) for a in args)]  # noqa: UP007
    if origin is list:
        return list[_translate(args[0], forbid_extras)]  # type: ignore[misc]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return typed_dict(annotation, forbid_extras=forbid_extras)
    return annotation


def typed_dict(model: type[BaseModel], *, forbid_extras: bool) -> Any:
    """The TypedDict (keys = API names) equivalent to `model`."""
    key = (model, forbid_extras)
    if key not in _cache:
        fields: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            annotation = _translate(info.annotation, forbid_extras)
            if info.metadata:
                annotation = Annotated[(annotation, *info.metadata)]
            fields[info.alias or name] = Required[annotation] if info.is_required() else NotRequired[annotation]
        closed = model.model_config.get("extra") == "forbid"
        # built at run time from the model's fields, which mypy's TypedDict() does not take
        record: Any = TypedDict(f"{model.__name__}Record", fields)  # type: ignore[misc]
        _configure(record, ConfigDict(strict=True, extra="forbid" if forbid_extras or closed else "allow"))
        _cache[key] = record
    return _cache[key]


def _configure(record: Any, config: ConfigDict) -> None:
    """pydantic's configuration of a TypedDict, which the TypedDict carries itself."""
    record.__pydantic_config__ = config


class RecordValidator:
    """Page and record validators for one model."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        # type forms built at run time: to mypy a page is a list of dicts
        closed_page: Any = list[typed_dict(model, forbid_extras=True)]  # type: ignore[misc]
        open_page: Any = list[typed_dict(model, forbid_extras=False)]  # type: ignore[misc]
        self.page_without_extras = TypeAdapter[list[dict[str, Any]]](closed_page)
        self.page_with_extras = TypeAdapter[list[dict[str, Any]]](open_page)
        self.record = TypeAdapter[dict[str, Any]](typed_dict(model, forbid_extras=False))


@cache
def record_validator(model: type[BaseModel]) -> RecordValidator:
    """The one RecordValidator of `model` in this process: building its three TypeAdapters generates pydantic's
    schemas, 10-30 ms each, and every run's client makes a decoder per stream (~80 ms of the event loop a run)."""
    return RecordValidator(model)


# Quarantine: a record that broke its schema, kept raw with where it came from and why


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
        if (
            isinstance(item, dict)
            and part in item
            or isinstance(item, list)
            and isinstance(part, int)
            and 0 <= part < len(item)
        ):
            item = item[part]
        elif isinstance(item, dict) or part not in ("float", "int", "str", "bool"):
            found.append(part)  # a missing field, named by the error
            break
        else:
            break
        found.append(part)
    return tuple(found)


def _describe(errors: Sequence[Mapping[str, Any]], item: Any) -> tuple[str, str]:
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


def quarantine_row(where: PageLocation, index: int, item: Any, errors: Sequence[Mapping[str, Any]]) -> QuarantineRow:
    field, message = _describe(errors, item)
    return quarantined_row(where, index, field, message, raw_json_text(item))


def raw_json_text(item: Any) -> str:
    try:
        return orjson.dumps(item, default=str).decode()
    except TypeError:  # what orjson cannot write (an integer past 64 bits, nesting past 254 levels)
        return json.dumps(item, default=str, ensure_ascii=False)


# A record with a date-time outside the range a timestamp holds (columns.utc_overflows) is quarantined.
TimestampPath = tuple[str, ...]  # API names; "*" steps into every item of a list


def timestamp_paths(model: type[BaseModel], path: TimestampPath = ()) -> list[TimestampPath]:
    """Where date-times sit in records of `model`, nested objects and lists of objects included."""
    found: list[TimestampPath] = []
    for name, info in model.model_fields.items():
        where = (*path, info.alias or name)
        for member in strip_optional(info.annotation):
            if member is datetime:
                found.append(where)
            elif is_model(member):
                found += timestamp_paths(member, where)
            elif typing.get_origin(member) is list:
                found += [
                    p
                    for item in strip_optional(typing.get_args(member)[0])
                    if is_model(item)
                    for p in timestamp_paths(item, (*where, "*"))
                ]
    return found


def timestamp_errors(record: Any, paths: list[TimestampPath]) -> list[dict[str, Any]]:
    """Validation-style errors ({loc, msg, input}) for the record's date-times that overflow in UTC."""
    errors: list[dict[str, Any]] = []
    for path in paths:
        _overflowing(record, path, (), errors)
    return errors


def _overflowing(node: Any, path: TimestampPath, loc: tuple[Any, ...], errors: list[dict[str, Any]]) -> None:
    if not path:
        if utc_overflows(node):
            errors.append({"loc": loc, "msg": OVERFLOW_MESSAGE, "input": node.isoformat()})
        return
    step, rest = path[0], path[1:]
    if step == "*":
        for index, item in enumerate(node if isinstance(node, list) else ()):
            _overflowing(item, rest, (*loc, index), errors)
    elif isinstance(node, dict) and node.get(step) is not None:
        _overflowing(node[step], rest, (*loc, step), errors)


# Records the JSON parser refuses in a complete page

_STRUCTURE = re.compile(rb'["\\\[\]{},]')
_MAX_READABLE_DEPTH = 100  # deeper than this, a record is named by the top-level field holding the depth


def split_json_array(body: bytes) -> list[bytes] | None:
    """The top-level items of a JSON array as byte slices, found by its structure alone (strings, escapes,
    brackets); None when the body is not one complete array (cut short, or not an array)."""
    text = body.strip()
    if len(text) < 2 or text[:1] != b"[" or text[-1:] != b"]":
        return None
    items: list[bytes] = []
    depth, start, in_string, escaped_at = 0, 1, False, -1
    for match in _STRUCTURE.finditer(text, 1, len(text) - 1):
        at, char = match.start(), text[match.start()]
        if at == escaped_at:
            continue
        if in_string:
            if char == 0x5C:  # backslash: the next character is escaped
                escaped_at = at + 1
            elif char == 0x22:
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in b"[{":
            depth += 1
        elif char in b"]}":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:  # a comma between items
            items.append(text[start:at].strip())
            start = at + 1
    if in_string or depth:
        return None
    last = text[start:-1].strip()
    if last:
        items.append(last)
    elif items:
        return None  # a trailing comma
    return None if any(not item for item in items) else items


def unreadable_row(where: PageLocation, index: int, item: bytes, message: str) -> QuarantineRow:
    """A record the JSON parser refuses, kept as served (invalid UTF-8 replaced), its field found if it can be."""
    text = item.decode("utf-8", errors="replace")
    field = _unreadable_field(text)
    message = f"{field}: unreadable JSON ({message}): an unpaired surrogate or nesting too deep"
    return quarantined_row(where, index, field, message, text)


def quarantined_row(where: PageLocation, index: int, field: str, message: str, raw: str) -> QuarantineRow:
    return QuarantineRow(
        seen_at=datetime.now(UTC),
        stream=where.stream,
        endpoint=where.endpoint,
        params=orjson.dumps(dict(where.params)).decode(),
        page=where.page,
        record_index=index,
        field=field,
        message=message,
        raw=raw,
    )


def _unreadable_field(text: str) -> str:
    """The path of the first string with an unpaired surrogate, or the top-level field holding nesting deeper
    than _MAX_READABLE_DEPTH; "(record)" when neither is found (Python's own parser may refuse it too)."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return "(record)"
    stack: list[tuple[Any, tuple[Any, ...]]] = [(record, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > _MAX_READABLE_DEPTH:
            return str(path[0])
        if isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value):
            return _path(path)
        if isinstance(value, dict):
            stack.extend((v, (*path, k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(value))))
    return "(record)"


# The validated decoder


class PageDecoder:
    """Turns page bodies of one stream into valid records plus quarantine rows.

    Fast path: the whole page validated in Rust, unknown fields forbidden. If only unknown fields broke
    it, the page is validated again keeping them. Otherwise each record is validated alone: the bad
    ones are quarantined, the rest load.
    """

    def __init__(self, stream: StreamSpec) -> None:
        self._stream = stream
        self._validator = record_validator(stream.model)
        fields = stream.model.model_fields
        self._key_fields = [
            fields[name].alias or name
            for name in TABLES[stream.table].key
            if name in fields and not fields[name].is_required()
        ]
        self._timestamp_paths = timestamp_paths(stream.model)

    def decode(self, body: bytes, where: PageLocation) -> DecodedPage:
        try:
            return self._checked(DecodedPage(where, 0, self._validator.page_without_extras.validate_json(body), []))
        except ValidationError as exc:
            errors = exc.errors()
        if any(e["type"] == "json_invalid" for e in errors):
            items = split_json_array(body)
            if items is None:  # not a complete array: cut short on the way
                raise TruncatedBody(errors[0]["msg"])
            return self._decode_items(items, where)  # complete, but a record the parser refuses
        if any(len(e["loc"]) == 0 for e in errors):
            raise PlatformResponseError(
                f"{where} ({self._stream.name}): expected a JSON array of "
                f"{self._stream.model.__name__} records: {errors[0]['msg']}"
            )
        if all(e["type"] == "extra_forbidden" for e in errors):
            try:
                records = self._validator.page_with_extras.validate_json(body)
                return self._checked(DecodedPage(where, 0, records, [], with_extras=True))
            except ValidationError as exc:  # unknown fields inside a closed object: find the records
                errors = exc.errors()
        return self._decode_slowly(body, errors, where)

    def _decode_slowly(self, body: bytes, errors: list[Any], where: PageLocation) -> DecodedPage:
        raw = orjson.loads(body)
        by_index: dict[int, list[Mapping[str, Any]]] = {}
        for error in errors:
            if error["type"] != "extra_forbidden":  # unknown fields are kept, not errors
                by_index.setdefault(int(error["loc"][0]), []).append({**error, "loc": error["loc"][1:]})
        page = DecodedPage(where, len(raw), [], [], with_extras=True)
        positions: list[int] = []  # where each kept record sat in the page
        for index, item in enumerate(raw):
            if index in by_index:
                self._quarantine(page, index, item, by_index[index])
                continue
            try:
                page.records.append(self._validator.record.validate_python(item))
                positions.append(index)
            except ValidationError as exc:  # e.g. an unknown field inside an object the spec closes
                self._quarantine(page, index, item, exc.errors())
        return self._checked(page, positions)

    def _decode_items(self, items: list[bytes], where: PageLocation) -> DecodedPage:
        """A complete page with records the JSON parser refuses (an unpaired surrogate, nesting deeper than it
        reads): each record parsed alone, the unreadable ones quarantined, the rest validated as usual."""
        page = DecodedPage(where, len(items), [], [], with_extras=True)
        positions: list[int] = []
        for index, item in enumerate(items):
            try:
                page.records.append(self._validator.record.validate_json(item))
                positions.append(index)
            except ValidationError as exc:
                errors = exc.errors()
                if any(e["type"] == "json_invalid" for e in errors):
                    page.quarantined.append(unreadable_row(where, index, item, errors[0]["msg"]))
                    log.warning("quarantined record %d of %s (%s): unreadable JSON", index, where, where.stream)
                else:
                    self._quarantine(page, index, orjson.loads(item), errors)
        return self._checked(page, positions)

    def _checked(self, page: DecodedPage, positions: list[int] | None = None) -> DecodedPage:
        """Valid records the warehouse still cannot hold are quarantined: those missing a key field (only
        optional key fields can be) and those with a date-time outside the UTC range (timestamp_errors)."""
        page.served = page.served or len(page.records)
        page.positions = positions
        keys, dates = self._key_fields, self._timestamp_paths
        if all(None not in [r.get(k) for r in page.records] for k in keys) and not any(
            timestamp_errors(r, dates) for r in page.records
        ):
            return page
        kept = []
        key_message = (
            f"missing, and table {self._stream.table} cannot key a record without it "
            f"(key: {', '.join(TABLES[self._stream.table].key)})"
        )
        kept_positions = []
        for number, record in enumerate(page.records):
            errors = [{"loc": (name,), "msg": key_message} for name in keys if record.get(name) is None]
            errors += timestamp_errors(record, dates)
            index = number if positions is None else positions[number]
            if not errors:
                kept.append(record)
                kept_positions.append(index)
                continue
            self._quarantine(page, index, record, errors)
        page.records, page.positions = kept, kept_positions
        return page

    def _quarantine(self, page: DecodedPage, index: int, item: Any, errors: Sequence[Mapping[str, Any]]) -> None:
        quarantine_into(page, index, item, errors)


def quarantine_into(page: DecodedPage, index: int, item: Any, errors: Sequence[Mapping[str, Any]]) -> None:
    row = quarantine_row(page.location, index, item, errors)
    page.quarantined.append(row)
    log.warning("quarantined record %d of %s (%s): %s", index, page.location, page.location.stream, row.message)
