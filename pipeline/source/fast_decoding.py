"""The fast path of page decoding: a page body straight to Arrow batches, with no per-record validation in
Python and no dicts.

How: the pydantic models are translated (here, at import) into msgspec Structs with the same fields, API
names, types, enumerations (Literal), required/nullable rules and defaults, all strict, and closed to
unknown fields. msgspec decodes and validates a whole page in C, into compact Structs; the columns are
read off them attribute by attribute (one C-level `map(attrgetter)` per column) and converted to Arrow
in C++. Date-times are decoded as text and parsed by Arrow in bulk (below).

The fast path only ever accepts a page it can decode *exactly* as the validated path (decoding.PageDecoder)
would. Whenever it finds anything unusual in a page, it gives up on that page and returns None, and the
caller decodes the page through PageDecoder, record by record if need be, so quarantine rows (endpoint,
page, record index, field, message, raw JSON), unknown fields kept in `extra`, truncated bodies and
errors are exactly those of the validated path.

What counts as unusual, how date-times are read, and which models have no fast path: docs/design.md, "The fast
path of page decoding".
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import chain
from operator import attrgetter
from typing import Any, Literal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic_core
from msgspec.structs import astuple
from pydantic import BaseModel
from pydantic.types import Strict

from pipeline.contract.columns import TIMESTAMP, Leaf, epoch_us
from pipeline.contract.columns import leaves as model_leaves
from pipeline.contract.streams import StreamSpec
from pipeline.contract.tables import BUILDS, ChildTable, RecordTable
from pipeline.source.decoding import Batch, Page, PageLocation, gc_paused, record_key_fields
from pipeline.source.paging import Request

Unsupported = type("Unsupported", (), {})
_cache: dict[tuple[type[BaseModel], bool], Any] = {}

# Plain ISO 8601 as the platform writes it; anything else goes the validated way.
_ISO = (
    r"^[1-9]\d{3}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?"
    r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?$"
)
_HAS_OFFSET = r"(Z|[+-]\d\d:\d\d)$"


def _is_timestamp(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is datetime


def _translate(annotation: Any, closed: bool) -> Any:
    """The msgspec type validating what pydantic (strict) validates for `annotation`, or Unsupported."""
    if _is_timestamp(annotation):
        if typing.get_origin(annotation) is typing.Annotated and not all(
            isinstance(m, Strict) or getattr(m, "metadata", None) == [Strict(strict=False)]
            for m in annotation.__metadata__
        ):
            return Unsupported
        return str  # parsed by Arrow in bulk
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return Unsupported
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if set(members) >= {float, int}:  # Number: JSON integers and floats, not bools; Arrow float64
            members = [float, *(a for a in members if a not in (float, int))]
        translated = [_translate(a, closed) for a in members]
        if Unsupported in translated:
            return Unsupported
        union = translated[0]
        for other in translated[1:]:
            union = union | other
        return union | None if type(None) in args else union
    if origin is Literal:
        return annotation if all(isinstance(v, str) for v in args) else Unsupported
    if origin is list:
        item = _translate(args[0], closed)
        return Unsupported if item is Unsupported else list[item]  # type: ignore[valid-type]
    if annotation in (str, bool, float, int):
        return annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        struct = fast_struct(annotation, closed=closed)
        return Unsupported if struct is None else struct
    return Unsupported


def fast_struct(model: type[BaseModel], *, closed: bool = True) -> Any:
    """The msgspec Struct equivalent to `model`, or None when not translatable. `closed`: unknown fields are
    errors (the first try); otherwise they are skipped (models the spec closes reject them either way)."""
    key = (model, closed)
    if key not in _cache:
        _cache[key] = None  # recursion guard
        fields: list[tuple[Any, ...]] = []
        for name, info in model.model_fields.items():
            annotation = _translate(info.annotation, closed)
            if annotation is Unsupported or info.metadata or info.default_factory is not None:
                return None
            if isinstance(info.default, (list, dict, set)):
                return None
            alias = info.alias or name
            if info.is_required():
                fields.append((name, annotation, msgspec.field(name=alias)))
            else:
                fields.append((name, annotation, msgspec.field(default=info.default, name=alias)))
        forbid = closed or model.model_config.get("extra") == "forbid"
        _cache[key] = msgspec.defstruct(
            f"{model.__name__}{'Closed' if closed else 'Open'}",
            fields,
            kw_only=True,
            forbid_unknown_fields=forbid,
            gc=False,
        )
    return _cache[key]


def _attribute_path(model: type[BaseModel], api_path: Sequence[str]) -> tuple[str, ...]:
    """API names (`stats`, `progressInPercent`) -> Struct attribute names (`stats`, `progress_in_percent`)."""
    found: list[str] = []
    for key in api_path:
        name, info = next((n, i) for n, i in model.model_fields.items() if (i.alias or n) == key)
        found.append(name)
        members = [a for a in typing.get_args(info.annotation) or (info.annotation,) if a is not type(None)]
        nested = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
        model = nested[0] if nested else model
    return tuple(found)


class _Columns:
    """Arrow arrays of one model's leaves (columns.leaves) read from its Structs.

    Values are read by transposing: each Struct (the records, then each nested object) becomes a tuple
    once (msgspec.structs.astuple, in C) and zip(*) turns the tuples into columns, so every record is
    visited once per object level rather than once per column (records of a page are scattered in
    memory: fewer passes, fewer cache misses)."""

    def __init__(self, model: type[BaseModel], leaves: Sequence[Leaf]) -> None:
        self.leaves = tuple(leaves)
        if any(leaf.kind == "json" for leaf in self.leaves):
            raise _NoFastPath(f"{model.__name__} has JSON columns")
        self.paths = [_attribute_path(model, leaf.path) for leaf in self.leaves]
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}  # object path -> its Struct's fields, in order
        for path in self.paths:
            for depth in range(len(path)):
                self._names.setdefault(path[:depth], tuple(_model_at(model, path[:depth]).model_fields))

    def _columns(self, records: Sequence[Any]) -> Callable[[tuple[str, ...]], Sequence[Any]]:
        """A reader of columns by attribute path over `records`, transposing each object level once.

        No closure refers to itself here: a recursive inner function is a reference cycle (function ->
        cell -> function) that kept every transposed value of a page (and the answers' result lists) alive
        until the cyclic collector ran, which then spent milliseconds per page freeing them."""
        return _Transposed(records, self._names).column

    def arrays(self, records: Sequence[Any]) -> list[pa.Array] | None:
        """One array per leaf, then `extra` (always null: the fast path never sees unknown fields);
        None when a date-time needs the validated path."""
        column = self._columns(records)
        arrays: list[pa.Array] = []
        for leaf, path in zip(self.leaves, self.paths, strict=True):
            values = column(path)
            if leaf.kind == "timestamp":
                array = _timestamps(values)
                if array is None:
                    return None
            elif leaf.kind == "number":
                array = pa.array([v if v.__class__ is float else None for v in values], type=pa.float64())
            elif leaf.kind == "text":
                array = pa.array([v if v.__class__ is str else None for v in values], type=pa.string())
            else:
                array = pa.array(values, type=leaf.type)
            arrays.append(array)
        arrays.append(pa.nulls(len(records), type=pa.string()))
        return arrays


class _Transposed:
    """Columns of one page's Structs by attribute path, each object level transposed once (see _Columns)."""

    __slots__ = ("_records", "_names", "_found")

    def __init__(self, records: Sequence[Any], names: Mapping[tuple[str, ...], tuple[str, ...]]) -> None:
        self._records, self._names = records, names
        self._found: dict[tuple[str, ...], dict[str, Sequence[Any]]] = {}

    def column(self, path: tuple[str, ...]) -> Sequence[Any]:
        prefix = path[:-1]
        found = self._found
        if prefix not in found:
            objects = self.column(prefix) if prefix else self._records
            names = self._names[prefix]
            absent = objects.count(None) if prefix else 0
            if absent == len(objects):  # no object at all (or no records): every value None
                columns: Sequence[Sequence[Any]] = [objects] * len(names)
            elif absent:
                empty = (None,) * len(names)
                columns = list(zip(*[empty if o is None else astuple(o) for o in objects], strict=True))
            else:
                columns = list(zip(*map(astuple, objects), strict=True))
            found[prefix] = dict(zip(names, columns, strict=True))
        return found[prefix][path[-1]]


def _model_at(model: type[BaseModel], path: Sequence[str]) -> type[BaseModel]:
    """The model of the nested object at attribute `path`."""
    for name in path:
        annotation = model.model_fields[name].annotation
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        members = typing.get_args(annotation) if union else (annotation,)
        model = next(m for m in members if isinstance(m, type) and issubclass(m, BaseModel))
    return model


def _timestamps(values: Sequence[str | None]) -> pa.Array | None:
    """ISO 8601 text -> timestamp[us, UTC] (no offset = UTC); None when any value is not plain ISO 8601."""
    text = pa.array(values, type=pa.string())
    if text.null_count == len(text):
        return pa.nulls(len(text), type=TIMESTAMP)
    if _canonical(text):  # what the platform writes (checked in one pass, cheaper than the regex): UTC, in range
        try:
            return pc.cast(text, TIMESTAMP)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    plain = pc.match_substring_regex(text, _ISO)
    if not pc.all(pc.or_kleene(plain, pc.is_null(text))).as_py():
        return None
    with_offset = pc.match_substring_regex(text, _HAS_OFFSET)
    if not pc.all(pc.or_kleene(with_offset, pc.is_null(text))).as_py():
        text = pc.if_else(with_offset, text, pc.binary_join_element_wise(text, "Z", ""))
    try:
        parsed = pc.cast(text, TIMESTAMP)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. 30 February: the validated path decides
        return None
    return parsed if _in_utc_range(parsed) else None


# The instants a timestamp may hold (decoding.utc_overflows): an offset can push year 1 or 9999 past them.
_FIRST_US = epoch_us(datetime.min.replace(tzinfo=UTC))
_LAST_US = epoch_us(datetime.max.replace(tzinfo=UTC))


def _in_utc_range(parsed: pa.Array) -> bool:
    """Every value within 0001-01-01..9999-12-31 in UTC; the validated path quarantines the others."""
    bounds = pc.min_max(parsed.view(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    return low is None or (low >= _FIRST_US and high <= _LAST_US)


_CANONICAL = b"2026-05-05T07:43:45.815Z"  # the shape the platform writes
# per byte position: the lowest and highest byte allowed (a digit, a separator; the year's first digit 1-9)
_LOWEST = np.array([48 if chr(c).isdigit() else c for c in _CANONICAL], dtype=np.uint8)
_HIGHEST = np.array([57 if chr(c).isdigit() else c for c in _CANONICAL], dtype=np.uint8)
_LOWEST[0] = 49


def _canonical(text: pa.Array) -> bool:
    """Every value (nulls aside) is `YYYY-MM-DDTHH:MM:SS.fffZ`: digits and separators in place, a year
    not starting with 0; checked on the bytes with numpy (two broadcast comparisons against the
    allowed range of each position). Arrow's parser then rejects impossible dates."""
    present = text.drop_null() if text.null_count else text
    count, width = len(present), len(_CANONICAL)
    _, offsets, data = present.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int32, count=present.offset + count + 1)[present.offset :]
    if count == 0 or bounds[-1] - bounds[0] != count * width or (np.diff(bounds) != width).any():
        return False
    chars = np.frombuffer(data, dtype=np.uint8, count=int(bounds[-1]))[bounds[0] :].reshape(count, width)
    return bool((chars >= _LOWEST).all() and (chars <= _HIGHEST).all())


class _NoFastPath(Exception):
    pass


# Children the fast path builds: (child table) -> (records, path values) -> (parent indices, context
# columns, child Structs or None). Streams with any other child take the validated path.
ChildRows = tuple[np.ndarray, list[pa.Array], list[Any] | None]


def _answer_results(answers: Sequence[Any], _: Mapping[str, str]) -> ChildRows:
    lists = list(map(attrgetter("results"), answers))
    counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    indices = np.repeat(np.arange(len(lists), dtype=np.int64), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    position = np.arange(len(indices), dtype=np.int64) - starts
    return indices, [pa.array(position, type=pa.int64())], list(chain.from_iterable(lists))


def _group_members(users: Sequence[Any], path_values: Mapping[str, str]) -> ChildRows:
    group = pa.array([path_values["group_id"]] * len(users), type=pa.string())
    return np.arange(len(users), dtype=np.int64), [group], None


FAST_CHILDREN: dict[str, Callable[[Sequence[Any], Mapping[str, str]], ChildRows]] = {
    "answer_results": _answer_results,
    "group_members": _group_members,
}


class FastPages:
    """Page bodies of one stream -> Page (Arrow batches), or None: take the validated path."""

    def __init__(self, stream: StreamSpec) -> None:
        struct: Any = fast_struct(stream.model)  # a msgspec Struct class made at run time
        if struct is None:
            raise _NoFastPath(f"{stream.model.__name__} is not translatable")
        self._stream = stream
        self._decoder = msgspec.json.Decoder(list[struct])
        open_struct: Any = fast_struct(stream.model, closed=False)
        self._open_decoder = msgspec.json.Decoder(list[open_struct])
        own = BUILDS[stream.table]
        assert isinstance(own, RecordTable)
        self._own = own
        self._own_columns = _Columns(stream.model, own.columns.leaves)
        self._children: list[tuple[ChildTable, Callable[..., ChildRows], _Columns | None]] = []
        self._child_lists: dict[str, str | None] = {}  # child table -> API name of the list it comes from
        for child_name, _ in stream.children:
            if child_name not in FAST_CHILDREN:
                raise _NoFastPath(f"no fast builder for child table {child_name}")
            child = BUILDS[child_name]
            assert isinstance(child, ChildTable)
            columns = None
            if child.columns is not None:
                child_model = _child_model(stream.model, child_name)
                columns = _Columns(child_model, child.columns.leaves)
            self._children.append((child, FAST_CHILDREN[child_name], columns))
            self._child_lists[child_name] = _child_field(stream.model, child_name)
        schema = own.spec.schema
        self._optional_keys = [
            schema.get_field_index(k)
            for k in own.spec.key
            if k in stream.model.model_fields and not stream.model.model_fields[k].is_required()
        ]
        # the key as a tuple (a value alone for one field), hashed like fetching.SourceCore.key_getter's on the dicts
        self._key = attrgetter(*record_key_fields(stream))

    @classmethod
    def for_stream(cls, stream: StreamSpec) -> FastPages | None:
        try:
            return cls(stream)
        except _NoFastPath:
            return None

    def page(self, request: Request, body: bytes, where: PageLocation, with_keys: bool) -> Page | None:
        """The page as Arrow batches, or None: take the validated path. The collector is paused meanwhile
        (decoding.gc_paused)."""
        with gc_paused():
            return self._page(request, body, where, with_keys)

    def _page(self, request: Request, body: bytes, where: PageLocation, with_keys: bool) -> Page | None:
        raw: list[Any] | None = None  # the page as dicts, only when it has unknown fields
        try:
            records = self._decoder.decode(body)
        except msgspec.ValidationError as error:
            if not str(error).startswith("Object contains unknown field"):
                return None
            try:  # new fields the platform added: validated the same, then kept in `extra`
                records = self._open_decoder.decode(body)
                # read by the validated path's parser, so a record it refuses (nesting too deep) goes its way
                raw = pydantic_core.from_json(body)
            except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
                return None
        except (msgspec.DecodeError, RecursionError):  # RecursionError: nesting past msgspec's depth limit
            return None
        if not records:
            return None
        arrays = self._own_columns.arrays(records)
        if arrays is None:
            return None
        if raw is not None:
            try:
                arrays[-1] = pa.array(list(map(self._own.columns.extras, raw)), type=pa.string())
            except TypeError:  # an extra orjson cannot write (an integer past 64 bits): the validated path decides
                return None
        for index in self._optional_keys:  # a record without its key: the validated path quarantines it
            if arrays[index].null_count:
                return None
        parent = pa.RecordBatch.from_arrays(arrays, schema=self._own.spec.schema)
        batches = [Batch(self._own.spec, parent, where.endpoint, where.page)]
        for child, expand, columns in self._children:
            indices, context, children = expand(records, request.path_values)
            if not len(indices):
                continue
            taken = pa.array(indices, type=pa.int64())
            keys = [parent.column(source).take(taken) for source, _ in child.parent_key]
            front = [*context, *keys] if child.context_first else [*keys, *context]
            rest: list[pa.Array] = []
            if columns is not None:
                assert children is not None
                built = columns.arrays(children)
                if built is None:
                    return None
                rest = built
                source = self._child_lists[child.spec.name]
                if raw is not None and source is not None:
                    items = chain.from_iterable(record[source] for record in raw)
                    assert child.columns is not None
                    try:
                        rest[-1] = pa.array(list(map(child.columns.extras, items)), type=pa.string())
                    except TypeError:
                        return None
            batches.append(
                Batch(
                    child.spec,
                    pa.RecordBatch.from_arrays([*front, *rest], schema=child.spec.schema),
                    where.endpoint,
                    where.page,
                )
            )
        hashes = None
        if with_keys:
            hashes = np.fromiter(map(hash, map(self._key, records)), dtype=np.int64, count=len(records))
        return Page(where, len(records), batches, len(records), 0, hashes, parent)


def _child_field(model: type[BaseModel], child_table: str) -> str | None:
    """API name of the list field of `model` whose items are the child table's records (None: no records)."""
    child = BUILDS[child_table]
    assert isinstance(child, ChildTable)
    if child.columns is None:
        return None
    item_model: Any = _child_model(model, child_table)  # a model class, compared as list[item_model]
    for name, info in model.model_fields.items():
        union = typing.get_origin(info.annotation) in (typing.Union, types.UnionType)
        if list[item_model] in (typing.get_args(info.annotation) if union else (info.annotation,)):
            return info.alias or name
    raise _NoFastPath(f"cannot find the list field of {child_table}")


def _child_model(model: type[BaseModel], child_table: str) -> type[BaseModel]:
    """The model of a child table's records: the item model of the parent's list field they come from."""
    child = BUILDS[child_table]
    assert isinstance(child, ChildTable) and child.columns is not None
    for info in model.model_fields.values():
        union = typing.get_origin(info.annotation) in (typing.Union, types.UnionType)
        for member in typing.get_args(info.annotation) if union else (info.annotation,):
            if typing.get_origin(member) is list:
                item = typing.get_args(member)[0]
                if (
                    isinstance(item, type)
                    and issubclass(item, BaseModel)
                    and [leaf.column for leaf in model_leaves(item)] == [leaf.column for leaf in child.columns.leaves]
                ):
                    return item
    raise _NoFastPath(f"cannot find the model of {child_table}")
