"""Which child tables a load replaces, and which child columns point at the parent's key.

By default (replace_children_of=None) every registered table whose spec names a parent written in this
load is replaced for the parent rows of this load, even when the load has no child rows at all (a parent
whose list became empty must lose its old children). Column pairing, unless given with ChildOf: the
leading columns of the child's key, in the parent key's order (answer_results(active_lesson_id, ...,
result_index) -> answers(active_lesson_id, ...); lesson_session_registrations(session_id, user_id) ->
lesson_sessions(id)); else the parent's key columns under the same names. Paired types must match."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.warehouse.duck.tabledef import TableDef
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.lake.manifest import ChildLink


@dataclass(frozen=True)
class ChildOf:
    """An explicit child -> parent link: `on` maps child columns to the parent's key columns."""

    parent: str
    on: Mapping[str, str] = field(default_factory=dict)


ChildLinks = Mapping[str, "str | ChildOf"]


def resolve_links(
    catalog: Mapping[str, TableDef], written: set[str], replace_children_of: ChildLinks | None
) -> tuple[ChildLink, ...]:
    if replace_children_of is None:
        wanted: dict[str, str | ChildOf] = {
            t.name: t.parent for t in catalog.values() if t.parent is not None and t.parent in written
        }
    else:
        wanted = dict(replace_children_of)
    links = []
    for child_name, target in sorted(wanted.items()):
        parent_name, on = (target, None) if isinstance(target, str) else (target.parent, dict(target.on) or None)
        child, parent = _table(catalog, child_name, "child"), _table(catalog, parent_name, "parent")
        pairs = on or _infer(child, parent)
        _check(child, parent, pairs)
        links.append(ChildLink(child.name, parent.name, tuple(pairs.items())))
    return tuple(links)


def _table(catalog: Mapping[str, TableDef], name: str, role: str) -> TableDef:
    if name not in catalog:
        raise SchemaError(
            f"replace_children_of names {role} table {name!r}, which the warehouse does not "
            "have; create it with Warehouse.ensure_tables(specs) or check the name."
        )
    return catalog[name]


def _infer(child: TableDef, parent: TableDef) -> dict[str, str]:
    if parent.key and len(child.key) > len(parent.key):
        return dict(zip(child.key[: len(parent.key)], parent.key, strict=True))
    if parent.key and all(k in child.column_names for k in parent.key):
        return {k: k for k in parent.key}
    raise SchemaError(
        f"cannot tell which columns of {child.name} point at {parent.name} (key "
        f"{list(parent.key)}): give the child the parent's key column names, start the child's "
        "key with them, or pass replace_children_of={child: ChildOf(parent, on={...})}."
    )


def _check(child: TableDef, parent: TableDef, pairs: Mapping[str, str]) -> None:
    if sorted(pairs.values()) != sorted(parent.key):
        raise SchemaError(
            f"the link {child.name} -> {parent.name} must cover the parent's key "
            f"{list(parent.key)} exactly, not {list(pairs.values())}."
        )
    missing = [c for c in pairs if c not in child.column_names]
    if missing:
        raise SchemaError(
            f"the link {child.name} -> {parent.name} uses columns {missing} that {child.name} does not have."
        )
    child_types, parent_types = dict(child.columns), dict(parent.columns)
    for child_column, parent_column in pairs.items():
        if child_types[child_column] != parent_types[parent_column]:
            raise SchemaError(
                f"the link {child.name}.{child_column} -> {parent.name}.{parent_column} pairs "
                f"{child_types[child_column]} with {parent_types[parent_column]}; pass the right "
                "columns with ChildOf(parent, on={child_column: parent_key_column})."
            )
