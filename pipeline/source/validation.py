"""Validators derived from the pydantic models: the same fields, aliases, types, enumerations, strictness
and required/nullable rules, but producing plain dicts (TypedDicts) instead of model instances.

Why: building model objects dominates decoding cost (~3x the JSON parse itself), while the warehouse
wants columns. TypedDict validation runs wholly in Rust (pydantic-core) and its dicts feed Arrow's C++
conversion directly. The models stay the single source of truth: these are generated from them, and a
test checks both accept and reject the same records.

Two flavours per model: `forbid_extras=True` rejects unknown fields (the fast path: a page without any
unknown field needs no per-record extras scan) and `False` keeps them (the models' extra="allow"). Models
declared closed in the spec (extra="forbid") forbid them in both.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, NotRequired, Required, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

_cache: dict[tuple[type[BaseModel], bool], Any] = {}


def _translate(annotation: Any, forbid_extras: bool) -> Any:
    """`annotation` with every model replaced by its TypedDict."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return Annotated[(_translate(args[0], forbid_extras), *annotation.__metadata__)]  # type: ignore[misc]
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
                annotation = Annotated[(annotation, *info.metadata)]  # type: ignore[misc]
            fields[info.alias or name] = Required[annotation] if info.is_required() else NotRequired[annotation]
        closed = model.model_config.get("extra") == "forbid"
        record = TypedDict(f"{model.__name__}Record", fields)  # type: ignore[operator]
        record.__pydantic_config__ = ConfigDict(strict=True, extra="forbid" if forbid_extras or closed else "allow")
        _cache[key] = record
    return _cache[key]


class RecordValidator:
    """Page and record validators for one model."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.page_without_extras = TypeAdapter(list[typed_dict(model, forbid_extras=True)])  # type: ignore[misc]
        self.page_with_extras = TypeAdapter(list[typed_dict(model, forbid_extras=False)])  # type: ignore[misc]
        self.record = TypeAdapter(typed_dict(model, forbid_extras=False))
