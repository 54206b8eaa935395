"""Expected warehouse rows computed from the simulator's ground truth, independently of the client code:
a small re-implementation of the flattening rules (snake_case, prefixes, JSON text, value split) so a
bug in the client's derivation shows up as a difference."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pyarrow as pa

from pipeline.contract.tables import TABLES


def snake(api_name: str) -> str:
    name = re.sub(r"ID$", "Id", api_name.lstrip("_"))
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in record.items():
        column = prefix + snake(key)
        if isinstance(value, dict):
            flat.update(flatten(value, column + "_"))
        else:
            flat[column] = value
    return flat


def _typed(value: Any, field: pa.Field) -> Any:
    if value is None:
        return None
    if field.metadata and field.metadata.get(b"json") == b"1":
        return value  # compared as parsed JSON
    if pa.types.is_timestamp(field.type):
        return datetime.fromisoformat(value)
    if pa.types.is_floating(field.type):
        return float(value)
    return value


def expected_row(table: str, flat: dict[str, Any]) -> dict[str, Any]:
    schema = TABLES[table].schema
    row = {f.name: _typed(flat.get(f.name), f) for f in schema if f.name != "extra"}
    unknown = {
        k
        for k, v in flat.items()
        if k not in schema.names and v is not None and not any(n.startswith(k + "_") for n in schema.names)
    }
    assert not unknown, f"{table}: ground-truth fields with no column: {unknown}"
    return row


def actual_row(table: str, row: dict[str, Any]) -> dict[str, Any]:
    schema = TABLES[table].schema
    out = {}
    for field in schema:
        if field.name == "extra":
            continue
        value = row[field.name]
        if field.metadata and field.metadata.get(b"json") == b"1" and value is not None:
            value = json.loads(value)
        out[field.name] = value
    return out


def keyed(table: str, rows: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """Rows by key, later rows winning (the warehouse's upsert)."""
    key = TABLES[table].key
    return {tuple(r[k] for k in key): r for r in rows}


def split_value(result: dict[str, Any]) -> dict[str, Any]:
    result = dict(result)
    value = result.pop("value", None)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return {
        **result,
        "valueNumber": value if is_number else None,
        "valueText": value if isinstance(value, str) else None,
    }


def expected_tables(truth: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Every table's expected rows from ground-truth records (API field names)."""
    tables: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for record in truth.get("active_lessons", []):
        tables["active_lessons"].append(expected_row("active_lessons", flatten(record)))
    for answer in truth.get("answers", []):
        parent = flatten({k: v for k, v in answer.items() if k != "results"})
        tables["answers"].append(expected_row("answers", parent))
        key = {k: parent.get(k) for k in TABLES["answers"].key}
        for index, result in enumerate(answer["results"]):
            flat = {**key, "result_index": index, **flatten(split_value(result))}
            tables["answer_results"].append(expected_row("answer_results", flat))
    for name in ("groups", "users", "categories"):
        tables[name] = [expected_row(name, flatten(r)) for r in truth.get(name, [])]
    tables["group_members"] = [{"group_id": m["groupId"], "user_id": m["id"]} for m in truth.get("group_members", [])]
    for session in truth.get("lesson_sessions", []):
        tables["lesson_sessions"].append(
            expected_row("lesson_sessions", flatten({k: v for k, v in session.items() if k != "registrations"}))
        )
        for registration in session["registrations"]:
            tables["lesson_session_registrations"].append(
                expected_row("lesson_session_registrations", {"session_id": session["id"], **flatten(registration)})
            )
    for lesson in truth.get("lessons", []):
        tables["lessons"].append(expected_row("lessons", flatten(lesson)))
        for n, notion in enumerate(lesson.get("notions") or []):
            for quiz, quizz in (("entry", notion.get("entryQuizz")), ("exit", notion.get("exitQuizz"))):
                for q, question in enumerate((quizz or {}).get("questions") or []):
                    flat = {
                        "lesson_id": lesson["id"],
                        "notion_index": n,
                        "notion_title": notion["title"],
                        "quiz": quiz,
                        "quizz_type": quizz.get("type"),
                        "quizz_life_number": quizz.get("lifeNumber"),
                        "question_index": q,
                        **flatten(question, "question_"),
                    }
                    tables["lesson_questions"].append(expected_row("lesson_questions", flat))
    return tables


def assert_same_table(table: str, actual: Iterable[dict[str, Any]], expected: Iterable[dict[str, Any]]) -> None:
    """Same keys, and for every key the same value in every column (extra must be null: no unknown fields)."""
    actual_rows = list(actual)
    assert all(r.get("extra") is None for r in actual_rows), f"{table}: unexpected extra fields"
    got = keyed(table, (actual_row(table, r) for r in actual_rows))
    want = keyed(table, expected)
    assert got.keys() == want.keys(), (
        f"{table}: {len(want.keys() - got.keys())} missing, {len(got.keys() - want.keys())} unexpected; "
        f"e.g. missing {sorted(want.keys() - got.keys(), key=str)[:3]}"
    )
    for key, row in want.items():
        assert got[key] == row, f"{table} {key}: {got[key]} != {row}"
