"""Small SQL helpers shared by the analytics modules."""

from __future__ import annotations


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def relation(schema: str, name: str) -> str:
    return f"{quote(schema)}.{quote(name)}"


def string_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
