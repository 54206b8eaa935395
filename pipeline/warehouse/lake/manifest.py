"""The record of one committed load, written to the lake as JSON: which Parquet parts it wrote, which
snapshots were complete, the cursor, the load time, the table definitions at that moment, and what the
load did. Replaying the manifests in order (recovery, rebuild) reproduces the warehouse exactly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipeline.contract.evolution import DiscoveredColumn
from pipeline.warehouse.duck.tabledef import TableDef
from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.results import TableLoadStats

FORMAT_VERSION = 1


@dataclass(frozen=True)
class PartFile:
    path: str  # relative to the lake directory, '/'-separated
    rows: int
    bytes: int
    # the part's columns when they are fewer than its table's in the load (written before the load discovered a
    # column: contract/evolution.py); None: every column of the table
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TableLoad:
    """One table written in a load, with the spec facts the upsert rules need."""

    name: str
    kind: str
    key: tuple[str, ...]
    cursor_field: str | None
    parent: str | None
    columns: tuple[str, ...]  # data columns present in the parts
    parts: tuple[PartFile, ...]
    order_by: tuple[str, ...] = ()  # TableSpec.order_by: which version of a key wins (empty: the cursor field)
    content: str | None = None  # snapshot tables: the digest of the rows written (loading/content.py), else None

    def scan(self, options: str = "") -> str:
        """What reads the parts (the parameter $files) in SQL, with read_parquet's `options`: by column name when
        the parts differ in their columns (a load that discovered a column: a part lacks it, its values null)."""
        mixed = ", union_by_name = true" if any(part.columns is not None for part in self.parts) else ""
        return f"read_parquet($files{mixed}{', ' + options if options else ''})"


@dataclass(frozen=True)
class ChildLink:
    """Rows of `child` belong to the `parent` row whose key equals the child's `on` columns."""

    child: str
    parent: str
    on: tuple[tuple[str, str], ...]  # (child column, parent key column) pairs


@dataclass(frozen=True)
class LoadPlan:
    seq: int
    load_id: str
    stream: str
    run_id: str
    started_at: datetime
    loaded_at: datetime
    cursor: datetime | None  # as asked by the caller; the stored cursor never moves backwards
    tables: tuple[TableLoad, ...]
    complete_snapshots: tuple[str, ...]
    children: tuple[ChildLink, ...]
    catalog: tuple[TableDef, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)
    # columns this load added for fields the platform began sending (lms._discovered_columns): written with the load
    discovered: tuple[DiscoveredColumn, ...] = ()
    cursor_reset: bool = False  # an operator's `lessonsync reset`: the cursor is SET to `cursor` (moved back)
    position: int | None = None  # a stream read from an ordered log (the certificate inbox): its position
    drop_before: tuple[str, ...] = ()  # tables dropped before the rows go in (adopting tables written outside the lake)


@dataclass(frozen=True)
class LoadOutcome:
    cursor_before: datetime | None
    cursor_after: datetime | None
    tables: dict[str, TableLoadStats]
    position_before: int | None = None
    position_after: int | None = None
    repeat_of: int | None = None  # the load whose complete snapshot this one repeated row for row (merge/repeats.py)


def to_json(plan: LoadPlan, outcome: LoadOutcome) -> bytes:
    doc: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "seq": plan.seq,
        "load_id": plan.load_id,
        "stream": plan.stream,
        "run_id": plan.run_id,
        "started_at": plan.started_at.isoformat(),
        "loaded_at": plan.loaded_at.isoformat(),
        "cursor": _iso(plan.cursor),
        "tables": [_table_doc(t) for t in plan.tables],
        "complete_snapshots": list(plan.complete_snapshots),
        "children": [{"child": c.child, "parent": c.parent, "on": [list(p) for p in c.on]} for c in plan.children],
        "catalog": [_table_def_doc(t) for t in plan.catalog],
        "stats": dict(plan.stats),
        "outcome": {
            "cursor_before": _iso(outcome.cursor_before),
            "cursor_after": _iso(outcome.cursor_after),
            "tables": {name: s.as_dict() for name, s in outcome.tables.items()},
        },
    }
    if plan.cursor_reset:  # only then: manifests of ordinary loads stay as they were
        doc["cursor_reset"] = True
    if plan.position is not None or outcome.position_after is not None:  # likewise: position streams only
        doc["position"] = plan.position
        doc["outcome"]["position_before"] = outcome.position_before
        doc["outcome"]["position_after"] = outcome.position_after
    if plan.drop_before:
        doc["drop_before"] = list(plan.drop_before)
    if plan.discovered:  # only then: manifests of loads that discovered nothing stay as they were
        doc["discovered"] = [
            {"table": c.table, "column": c.column, "api_path": c.api_path, "type": c.type} for c in plan.discovered
        ]
    if outcome.repeat_of is not None:
        doc["outcome"]["repeat_of"] = outcome.repeat_of
    return json.dumps(doc, indent=1, sort_keys=False).encode()


def from_json(raw: bytes, where: str) -> tuple[LoadPlan, LoadOutcome]:
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT_VERSION:
            raise LakeError(
                f"manifest {where} has format {doc.get('format')!r}; this version reads "
                f"{FORMAT_VERSION}. Use the LessonSync version that wrote it."
            )
        plan = LoadPlan(
            seq=int(doc["seq"]),
            load_id=doc["load_id"],
            stream=doc["stream"],
            run_id=doc["run_id"],
            started_at=datetime.fromisoformat(doc["started_at"]),
            loaded_at=datetime.fromisoformat(doc["loaded_at"]),
            cursor=_dt(doc["cursor"]),
            tables=tuple(_table_from(t) for t in doc["tables"]),
            complete_snapshots=tuple(doc["complete_snapshots"]),
            children=tuple(
                ChildLink(c["child"], c["parent"], tuple((a, b) for a, b in c["on"])) for c in doc["children"]
            ),
            catalog=tuple(_table_def_from(t) for t in doc["catalog"]),
            stats=doc["stats"],
            cursor_reset=bool(doc.get("cursor_reset", False)),
            position=_int(doc.get("position")),
            drop_before=tuple(doc.get("drop_before", ())),
            discovered=tuple(
                DiscoveredColumn(c["table"], c["column"], c["api_path"], c["type"]) for c in doc.get("discovered", ())
            ),
        )
        out = doc["outcome"]
        outcome = LoadOutcome(
            _dt(out["cursor_before"]),
            _dt(out["cursor_after"]),
            {name: TableLoadStats(**s) for name, s in out["tables"].items()},
            _int(out.get("position_before")),
            _int(out.get("position_after")),
            _int(out.get("repeat_of")),
        )
    except LakeError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise LakeError(
            f"manifest {where} is not a valid load manifest ({error!r}); restore it from a "
            "backup or remove the load from the lake and re-sync its window."
        ) from None
    return plan, outcome


def _table_doc(t: TableLoad) -> dict[str, Any]:
    doc = {
        "name": t.name,
        "kind": t.kind,
        "key": list(t.key),
        "cursor_field": t.cursor_field,
        "parent": t.parent,
        "columns": list(t.columns),
        "parts": [_part_doc(p) for p in t.parts],
    }
    doc |= {"order_by": list(t.order_by)} if t.order_by else {}
    return doc | ({"content": t.content} if t.content else {})


def _table_from(d: dict[str, Any]) -> TableLoad:
    return TableLoad(
        d["name"],
        d["kind"],
        tuple(d["key"]),
        d["cursor_field"],
        d["parent"],
        tuple(d["columns"]),
        tuple(_part_from(p) for p in d["parts"]),
        tuple(d.get("order_by", ())),
        d.get("content"),
    )


def _part_doc(p: PartFile) -> dict[str, Any]:
    doc: dict[str, Any] = {"path": p.path, "rows": p.rows, "bytes": p.bytes}
    return doc if p.columns is None else doc | {"columns": list(p.columns)}


def _part_from(d: dict[str, Any]) -> PartFile:
    columns = d.get("columns")
    return PartFile(d["path"], d["rows"], d["bytes"], None if columns is None else tuple(columns))


def _table_def_doc(t: TableDef) -> dict[str, Any]:
    return {
        "name": t.name,
        "columns": [list(c) for c in t.columns],
        "key": list(t.key),
        "comment": t.comment,
        "kind": t.kind,
        "cursor_field": t.cursor_field,
        "parent": t.parent,
    }


def _table_def_from(d: dict[str, Any]) -> TableDef:
    return TableDef(
        d["name"],
        tuple((n, ty) for n, ty in d["columns"]),
        tuple(d["key"]),
        d["comment"],
        d["kind"],
        d["cursor_field"],
        d["parent"],
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
