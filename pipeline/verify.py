"""Is the warehouse equal to the platform? Compares every live row and every column of the raw tables
with the simulator's ground truth, which is served in API shape.

Deliberately independent of the client's flattening (pipeline/contract/columns.py): it derives the expected
rows from the API dicts with the naming rule alone (camelCase -> snake_case, leading underscores dropped,
nested objects prefixed by their parent, lists of objects as JSON, unknown fields in `extra` by their
dotted API path), so a bug in the client cannot hide itself here. A column the warehouse added for a field the
platform began sending (lms._discovered_columns) is compared like any other, its integers exactly, and must be
named by the rule and typed as its values are. Used by the end-to-end tests and the demo.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import duckdb

from pipeline.contract.streams import stream_of, stream_tables
from pipeline.warehouse import read_table_def

LOAD_METADATA = {"first_loaded_at", "last_loaded_at", "deleted_at"}
DEFAULTS = {("lessons", "play_mode"): "standard"}  # the spec's default, filled when the API omits it
UNION_COLUMNS = {"value"}  # AnswerResult.value: number or string -> value_number / value_text
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class GroundTruth(Protocol):
    def ground_truth(self, resource: str) -> Iterable[dict[str, Any]]: ...


@functools.lru_cache(maxsize=4096)  # the platform's field names, a few hundred; called for every field of every record
def column_name(api_name: str) -> str:
    return _CAMEL.sub("_", api_name.lstrip("_")).lower()


def flatten(record: dict[str, Any], prefix: str = "", path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(column, dotted API path, value) for every leaf; nested objects flattened, lists kept whole."""
    for name, value in record.items():
        column, api_path = prefix + column_name(name), f"{path}{name}"
        if isinstance(value, dict):
            yield from flatten(value, column + "_", api_path + ".")
        else:
            yield column, api_path, value


@dataclass
class TableDiff:
    table: str
    expected_rows: int = 0
    actual_rows: int = 0
    missing: list[tuple[Any, ...]] = field(default_factory=list)  # keys expected, not in the warehouse
    unexpected: list[tuple[Any, ...]] = field(default_factory=list)  # keys in the warehouse, not expected
    mismatches: list[str] = field(default_factory=list)  # examples: "key column: warehouse=.. platform=.."
    mismatch_count: int = 0

    @property
    def equal(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatch_count)

    def summary(self, limit: int = 5) -> str:
        if self.equal:
            return f"{self.table}: {self.actual_rows} rows, equal"
        parts = [f"{self.table}: expected {self.expected_rows} rows, warehouse has {self.actual_rows}"]
        if self.missing:
            parts.append(f"  {len(self.missing)} missing, e.g. {self.missing[:limit]}")
        if self.unexpected:
            parts.append(f"  {len(self.unexpected)} unexpected, e.g. {self.unexpected[:limit]}")
        if self.mismatches:
            parts.append(f"  {self.mismatch_count} field mismatches, e.g. " + "; ".join(self.mismatches[:limit]))
        return "\n".join(parts)


def _answer_key(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "active_lesson_id": a["_activeLessonId"],
        "quiz_type": a["quizType"],
        "attempt_index": a["attemptIndex"],
        "question_id": a.get("_questionId"),
    }


def _questions(truth: GroundTruth) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for lesson in truth.ground_truth("lessons"):
        for n, notion in enumerate(lesson.get("notions") or []):
            for quiz, quizz_field in (("entry", "entryQuizz"), ("exit", "exitQuizz")):
                quizz = notion.get(quizz_field) or {}
                for q, question in enumerate(quizz.get("questions") or []):
                    fixed = {
                        "lesson_id": lesson["id"],
                        "notion_index": n,
                        "notion_title": notion.get("title"),
                        "quiz": quiz,
                        "quizz_type": quizz.get("type"),
                        "quizz_life_number": quizz.get("lifeNumber"),
                        "question_index": q,
                    }
                    yield fixed, {"question": question}


def _plain(
    resource: str, drop: tuple[str, ...] = ()
) -> Callable[[GroundTruth], Iterator[tuple[dict[str, Any], dict[str, Any]]]]:
    def rows(truth: GroundTruth) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for record in truth.ground_truth(resource):
            yield {}, {k: v for k, v in record.items() if k not in drop}

    return rows


def _members(truth: GroundTruth) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for member in truth.ground_truth("group_members"):
        yield {"group_id": member["groupId"], "user_id": member["id"]}, {}


def _registrations(truth: GroundTruth) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for session in truth.ground_truth("lesson_sessions"):
        for registration in session.get("registrations") or []:
            yield {"session_id": session["id"]}, registration


def _results(truth: GroundTruth) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for answer in truth.ground_truth("answers"):
        for index, result in enumerate(answer.get("results") or []):
            yield {**_answer_key(answer), "result_index": index}, result


Expected = Callable[[GroundTruth], Iterator[tuple[dict[str, Any], dict[str, Any]]]]
# table -> expected rows as (fixed columns, API object to flatten); questions are flattened under "question_". A
# stream of one table needs no entry: its rows are the platform's records of the resource named as the table.
EXPECTED: dict[str, Expected] = {
    "active_lessons": _plain("active_lessons"),
    "answers": _plain("answers", drop=("results",)),
    "answer_results": _results,
    "groups": _plain("groups"),
    "users": _plain("users"),
    "group_members": _members,
    "categories": _plain("categories"),
    "lesson_sessions": _plain("lesson_sessions", drop=("registrations",)),
    "lesson_session_registrations": _registrations,
    "lessons": _plain("lessons"),
    "lesson_questions": _questions,
    "certificates": _plain("certificates"),  # delivered by webhook; the simulator's current state per _id
}
# Columns LessonSync derives itself, with no counterpart in the platform's records.
DERIVED = {"certificates": {"state", "last_event_id", "last_event_type", "last_received_at"}}
WEBHOOK_TABLES = ("certificates",)  # compared too (certificate_events holds deliveries: the platform has no truth of)


def verified_tables() -> tuple[str, ...]:
    """What compare_warehouse compares by default: every table a declared stream fills, then the certificates."""
    return (*stream_tables(), *WEBHOOK_TABLES)


def expected_rows(table: str) -> Expected:
    """How `table`'s rows derive from the platform's records: EXPECTED's entry, else for the one table of a stream
    the records of the resource named as the table; LookupError naming what to add for any other."""
    if table in EXPECTED:
        return EXPECTED[table]
    stream = stream_of(table)
    if stream is not None and stream.table_names == (table,):
        return _plain(table)
    raise LookupError(
        f"table lms.{table}: pipeline/verify.py has no ground truth for it; add to EXPECTED how its rows derive "
        "from the platform's records (docs/adding-a-stream.md)"
    )


def compare_table(conn: duckdb.DuckDBPyConnection, truth: GroundTruth, table: str, max_examples: int = 20) -> TableDiff:
    rows_of = expected_rows(table)
    columns, key = _columns(conn, table), _table_key(conn, table)
    types = _column_types(conn, table)
    live = "WHERE deleted_at IS NULL" if "deleted_at" in columns else ""
    data_columns = [c for c in columns if c not in LOAD_METADATA and c not in DERIVED.get(table, ())]
    cursor = conn.execute(f"SELECT {', '.join(_q(c) for c in data_columns)} FROM lms.{_q(table)} {live}")
    actual: dict[tuple[Any, ...], dict[str, Any]] = {}
    while chunk := cursor.fetchmany(10_000):
        for values in chunk:
            row = dict(zip(data_columns, values, strict=True))
            actual[tuple([_normal(row[k]) for k in key])] = row
    diff = TableDiff(table, actual_rows=len(actual))
    discovered, problems = _discovered(conn, table, types)
    diff.mismatch_count += len(problems)
    diff.mismatches += problems
    integers = {c for c, t in types.items() if t in INTEGER_TYPES}
    for fixed, api_object in rows_of(truth):
        expected = _expected_row(table, fixed, api_object, data_columns)
        diff.expected_rows += 1
        row_key = tuple([_normal(expected.get(k)) for k in key])
        found = actual.pop(row_key, None)
        if found is None:
            diff.missing.append(row_key)
            continue
        for column in data_columns:
            sent, held = expected.get(column), found[column]
            # equal values of one class have equal normal forms (_normal is a function of the value and its class)
            if sent.__class__ is held.__class__ and sent == held and column not in discovered:
                continue
            exact = column in integers  # an integer column holds the API's integers exactly, not as doubles
            want, got = _normal(sent, exact), _normal(held, exact)
            if column in discovered and sent is not None and not _HOLDS[discovered[column]](sent):
                want = f"{sent!r}, which a {discovered[column]} column does not hold"
            if want != got:
                diff.mismatch_count += 1
                if len(diff.mismatches) < max_examples:
                    diff.mismatches.append(f"{row_key} {column}: warehouse={got!r} platform={want!r}")
    diff.unexpected = list(actual)
    return diff


def compare_warehouse(
    conn: duckdb.DuckDBPyConnection, truth: GroundTruth, tables: Iterable[str] | None = None
) -> list[TableDiff]:
    """Every table of `tables` (default: verified_tables()) compared with the platform's records."""
    return [compare_table(conn, truth, table) for table in (verified_tables() if tables is None else tables)]


def _expected_row(table: str, fixed: dict[str, Any], api_object: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = dict(fixed)
    extra: dict[str, Any] = {}
    prefix = "question_" if table == "lesson_questions" else ""
    source = api_object.get("question", api_object) if table == "lesson_questions" else api_object
    for column, api_path, value in flatten(source, prefix):
        if column in UNION_COLUMNS and f"{column}_number" in columns:
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            row[f"{column}_number"] = value if is_number else None
            row[f"{column}_text"] = value if isinstance(value, str) else None
        elif column in columns and column not in fixed:
            row[column] = value
        elif column not in fixed and not (value is None and any(c.startswith(column + "_") for c in columns)):
            extra[api_path] = value  # (a null nested object is its flattened columns, all null)
    for (default_table, column), value in DEFAULTS.items():
        if default_table == table and row.get(column) is None:
            row[column] = value
    if "extra" in columns:
        row["extra"] = extra or None
    return row


def _normal(value: Any, exact_int: bool = False) -> Any:
    """One comparable form for API values and DuckDB values (integers as they are when `exact_int`)."""
    kind = value.__class__
    if value is None or kind is bool or kind is float:  # the commonest classes first, as the chain below has them
        return value
    if kind is int:
        return value if exact_int else float(value)
    if kind is str and value[4:5] != "-" and value[:1] not in "[{":
        return value  # neither a timestamp (YYYY-...) nor JSON
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=UTC)
    if isinstance(value, str) and _looks_like_timestamp(value):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return _normal(json.loads(value))
        except ValueError:
            return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()} or None
    return value


_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _looks_like_timestamp(text: str) -> bool:
    return bool(_TIMESTAMP.match(text))


INTEGER_TYPES = {"BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT"}
# The type a discovered column must have for the API values it holds (bool before int: a bool is an int in Python).
_HOLDS: dict[str, Callable[[Any], bool]] = {
    "BOOLEAN": lambda v: isinstance(v, bool),
    "BIGINT": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "DOUBLE": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "VARCHAR": lambda v: isinstance(v, str),
    "JSON": lambda v: isinstance(v, list),
}


def _discovered(conn: duckdb.DuckDBPyConnection, table: str, types: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The columns the warehouse discovered for `table` (lms._discovered_columns: column -> type), and what is wrong
    with them: each must be a column of the table, of the type it records, named from its API path by the naming
    rule (the platform's values must fit that type: compare_table checks each)."""
    try:
        found = conn.execute(
            "SELECT column_name, api_path, type FROM lms._discovered_columns WHERE table_name = ?", [table]
        ).fetchall()
    except duckdb.CatalogException:
        return {}, []
    problems = []
    for column, api_path, kind in found:
        named = "_".join(column_name(part) for part in api_path.split("."))
        if named != column or types.get(column) != kind or kind not in _HOLDS:
            problems.append(
                f"discovered column {table}.{column} (field {api_path}, {kind}): the warehouse has "
                f"{types.get(column, 'no such column')}, the naming rule says {named}"
            )
    return {column: kind for column, _, kind in found if kind in _HOLDS}, problems


def _column_types(conn: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'lms' AND table_name = ?",
        [table],
    ).fetchall()
    return dict(rows)


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'lms' "
        "AND table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    if not rows:
        raise LookupError(f"table lms.{table} does not exist in the warehouse; run a sync first")
    return [r[0] for r in rows]


def _table_key(conn: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    definition = read_table_def(conn, table)  # the key is in the warehouse's registry, not a DuckDB constraint
    if definition is None or not definition.key:
        raise LookupError(f"table lms.{table} has no key")
    return list(definition.key)


def _q(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
