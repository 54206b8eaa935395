"""Fields the platform begins to send: a platform that adds `quizTimeSeconds` to its active lessons one day,
without a new version of the spec. `SimulatorConfig(new_fields=[("active_lessons", "quizTimeSeconds", "int")])`
or `--new-field active_lessons:quizTimeSeconds:int[:ADVANCE[:SHARE]]`.

A field starts with the simulated-time advance it names (the first by default): from the instant that advance
begins, the records that change carry it, as a platform writes a new field as it updates its records; records left
untouched since do not (an incremental client reads exactly the ones that have it). `share` below 1 sends it on
that fraction of the records only, the same ones every time. Values are drawn from the seed, the record and its
version, so the ground truth and every page agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

FieldKind = Literal["int", "float", "bool", "str", "object", "list"]
KINDS: tuple[str, ...] = ("int", "float", "bool", "str", "object", "list")
RESOURCES = ("active_lessons",)  # where a new field can be sent (the records that change as time advances)


@dataclass(frozen=True)
class NewField:
    resource: str  # e.g. "active_lessons"
    name: str  # the API name sent, e.g. "quizTimeSeconds"
    kind: FieldKind = "int"
    from_advance: int = 1  # sent from the start of this simulated-time advance on (1: the first)
    share: float = 1.0  # of the records that change: a fixed subset when below 1

    def __post_init__(self) -> None:
        if self.resource not in RESOURCES:
            raise ValueError(
                f"new field {self.name!r}: resource {self.resource!r} is not one of {', '.join(RESOURCES)}"
            )
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"new field {self.name!r}: the name must be a plain API name, e.g. quizTimeSeconds")
        if self.kind not in KINDS:
            raise ValueError(f"new field {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.from_advance < 1:
            raise ValueError(f"new field {self.name!r}: from_advance must be 1 or more, got {self.from_advance}")
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"new field {self.name!r}: share must be above 0 and at most 1, got {self.share}")

    def sent_on(self, seed: int, record: int) -> bool:
        """Whether record number `record` is one of the share that carries the field."""
        return self.share >= 1.0 or _hash(seed, self.name, record) < self.share * 2**32

    def value(self, seed: int, record: int, version: int) -> Any:
        """The value record `record` carries at `version` (its lastDate in ms)."""
        h = _hash(seed, self.name, record, version)
        if self.kind == "int":
            return h % 3600
        if self.kind == "float":
            return (h % 100_000) / 100 + 0.25
        if self.kind == "bool":
            return h % 2 == 0
        if self.kind == "str":
            return f"{self.name}-{h % 1000}"
        if self.kind == "object":
            return {"seconds": h % 3600, "label": f"L{h % 7}"}
        return [h % 10, h % 7]


def _hash(seed: int, *parts: object) -> int:
    return zlib.crc32(":".join(str(p) for p in (seed, *parts)).encode())


def parse_new_field(spec: str | tuple[Any, ...] | NewField) -> NewField:
    """A NewField from `resource:name:kind[:from_advance[:share]]` text or the same as a tuple."""
    if isinstance(spec, NewField):
        return spec
    parts: list[Any] = spec.split(":") if isinstance(spec, str) else list(spec)
    if not 2 <= len(parts) <= 5:
        raise ValueError(f"new field {spec!r}: write resource:name[:kind[:from_advance[:share]]]")
    try:
        advance = int(parts[3]) if len(parts) > 3 else 1
        share = float(parts[4]) if len(parts) > 4 else 1.0
    except ValueError:
        raise ValueError(f"new field {spec!r}: from_advance is an integer and share a number") from None
    return NewField(parts[0], parts[1], parts[2] if len(parts) > 2 else "int", advance, share)


def parse_new_fields(specs: Iterable[str | tuple[Any, ...] | NewField]) -> tuple[NewField, ...]:
    fields = tuple(parse_new_field(spec) for spec in specs)
    names = [(f.resource, f.name) for f in fields]
    if len(set(names)) != len(names):
        raise ValueError("a new field is named twice for the same resource")
    return fields


def add_new_fields(
    record: dict[str, Any], started: list[tuple[NewField, int]], seed: int, index: int, last_ms: int
) -> None:
    """Put the started fields a record carries into it: those whose start it changed after, in its share."""
    for new, since_ms in started:
        if last_ms >= since_ms and new.sent_on(seed, index):
            record[new.name] = new.value(seed, index, last_ms)
