"""A model's properties file in dbt's own schema, `<model>.yml` beside `<model>.sql` (as jaffle-shop keeps them):
`version: 2`, then `models:` with the model's `name`, `description`, `config` (`materialized: table|view|incremental`,
default view in staging/ and table elsewhere; `unique_key` of an incremental model; `tags`, a name or a list of
names, the model's Dagster asset tags as dagster-dbt makes them; `meta: {publish: false}`, LessonSync's own key,
keeps it out of the analysts' snapshot), model-level `data_tests` and `columns` with their `description` and `data_tests`. The
format, with an example: dbt_like_sql/README.md.

Column tests: unique, not_null, accepted_values, relationships (target `ref('<model>')` or
`source('lms', '<table>')`), their arguments under `arguments:` and `severity` (error or warn) under `config:`;
model tests: dbt_utils.unique_combination_of_columns. Anything else, or a key this runner would silently ignore,
is an error naming the file and the place in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import TableRef
from pipeline.analytics.refs import parse_call

TestKind = Literal["unique", "not_null", "accepted_values", "relationships"]
Severity = Literal["error", "warn"]
Materialization = Literal["table", "view", "incremental"]

# YAML test name -> (kind it runs as, its arguments: name -> required)
COLUMN_TESTS: dict[str, tuple[TestKind, dict[str, bool]]] = {
    "unique": ("unique", {}),
    "not_null": ("not_null", {}),
    "accepted_values": ("accepted_values", {"values": True}),
    "relationships": ("relationships", {"to": True, "field": True}),
}
MODEL_TESTS: dict[str, tuple[TestKind, dict[str, bool]]] = {
    "dbt_utils.unique_combination_of_columns": ("unique", {"combination_of_columns": True}),
}
_MODEL_KEYS = {"name", "description", "config", "columns", "data_tests"}
_COLUMN_KEYS = {"name", "description", "data_tests"}
_RENAMED = "data_tests, dbt's name for tests since 1.8"


@dataclass(frozen=True)
class TestDecl:
    """A data test as written in YAML (`to` parsed, not yet checked against the known tables)."""

    kind: TestKind
    columns: tuple[str, ...]
    values: tuple[Any, ...] = ()
    to: TableRef | None = None
    to_field: str | None = None
    severity: Severity = "error"
    where: str = ""  # file and place in it, for error messages


@dataclass(frozen=True)
class ModelConfig:
    description: str = ""
    materialized: Materialization | None = None
    unique_key: tuple[str, ...] = ()
    publish: bool = True
    columns: dict[str, str] = field(default_factory=dict)  # column -> description
    tests: tuple[TestDecl, ...] = ()
    tags: tuple[str, ...] = ()


# libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents, an order of magnitude
# faster to parse, and every run builds the code location
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> Any:
    """The YAML document of `path` ({} when empty); invalid YAML is a ModelError naming the file."""
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) or {}
    except yaml.YAMLError as error:
        raise ModelError(f"{path}: is not valid YAML: {error}") from None


def load_config(path: Path, model: str) -> ModelConfig:
    """The properties of `model` from the YAML beside it; an absent file means no docs and no tests."""
    if not path.exists():
        return ModelConfig()
    raw = read_yaml(path)
    where = Where(path)
    where.expect(
        isinstance(raw, dict) and "models" in raw,
        "top level",
        "dbt's schema: `version: 2` and `models: [{name: ..., columns: [...]}]`",
    )
    where.expect(raw.get("version", 2) == 2, "version", "2, dbt's properties schema (or no version: dbt's default)")
    where.expect(set(raw) <= {"version", "models"}, "top level", f"only version and models (got {sorted(raw)})")
    entries = raw["models"]
    where.expect(
        isinstance(entries, list) and len(entries) == 1,
        "models",
        f"a list of one entry, the model {model!r} (one properties file per model)",
    )
    return _model_config(entries[0], model, where.at("models[0]"))


def _model_config(entry: Any, model: str, where: Where) -> ModelConfig:
    where.expect(isinstance(entry, dict), "", "a mapping with name, description, config, columns, data_tests")
    where.expect("tests" not in entry, "tests", _RENAMED)
    where.expect(set(entry) <= _MODEL_KEYS, "", f"only {', '.join(sorted(_MODEL_KEYS))} (got {sorted(entry)})")
    where.expect(entry.get("name") == model, "name", f"{model!r}, the model of the .sql file beside it")
    materialized, unique_key, publish, tags = _model_settings(entry.get("config") or {}, where.at("config"))
    tests = [
        _test(item, MODEL_TESTS, None, where.at(f"data_tests[{i}]"))
        for i, item in enumerate(_list(entry, "data_tests", where))
    ]
    columns: dict[str, str] = {}
    for index, column in enumerate(_list(entry, "columns", where)):
        name, description, column_tests = _column(column, where.at(f"columns[{index}]"), where)
        where.expect(name not in columns, f"columns[{index}].name", f"a column listed once ({name!r} is listed twice)")
        columns[name] = description
        tests += column_tests
    description = str(entry.get("description") or "").strip()
    return ModelConfig(description, materialized, unique_key, publish, columns, tuple(tests), tags)


def _column(column: Any, at_index: Where, model: Where) -> tuple[str, str, list[TestDecl]]:
    """A `columns:` entry: its name, description and tests."""
    at_index.expect(
        isinstance(column, dict) and isinstance(column.get("name"), str),
        "",
        "a mapping with the column's name (and description, data_tests)",
    )
    name = column["name"]
    at = model.at(f"columns.{name}")
    at.expect("tests" not in column, "tests", _RENAMED)
    at.expect(set(column) <= _COLUMN_KEYS, "", f"only {', '.join(sorted(_COLUMN_KEYS))} (got {sorted(column)})")
    tests = [
        _test(item, COLUMN_TESTS, name, at.at(f"data_tests[{i}]"))
        for i, item in enumerate(_list(column, "data_tests", at))
    ]
    return name, str(column.get("description") or "").strip(), tests


def _model_settings(config: Any, where: Where) -> tuple[Materialization | None, tuple[str, ...], bool, tuple[str, ...]]:
    where.expect(
        isinstance(config, dict) and set(config) <= {"materialized", "unique_key", "tags", "meta"},
        "",
        "a mapping of materialized, unique_key, tags and/or meta",
    )
    materialized = config.get("materialized")
    where.expect(
        materialized in (None, "table", "view", "incremental"), "materialized", "'table', 'view' or 'incremental'"
    )
    unique_key: tuple[str, ...] = ()
    if "unique_key" in config:
        unique_key = unique_key_columns(config["unique_key"], str(where.at("unique_key")))
    meta = config.get("meta") or {}
    where.expect(isinstance(meta, dict) and set(meta) <= {"publish"}, "meta", "a mapping of publish only")
    publish = meta.get("publish", True)
    where.expect(isinstance(publish, bool), "meta.publish", "true or false")
    tags = tag_names(config["tags"], str(where.at("tags"))) if "tags" in config else ()
    return materialized, unique_key, publish, tags


def unique_key_columns(value: Any, where: str) -> tuple[str, ...]:
    """An incremental model's `unique_key` (a column or a list of columns) as a tuple of column names."""
    columns = [value] if isinstance(value, str) else value
    if not isinstance(columns, list | tuple) or not columns or not all(isinstance(c, str) and c for c in columns):
        raise ModelError(f"{where}: expected a column name or a list of column names (got {value!r})")
    return tuple(columns)


def tag_names(value: Any, where: str) -> tuple[str, ...]:
    """A model's dbt `tags` (a name or a list of names) as a tuple of names, each once, in the order written."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ModelError(f"{where}: expected a tag name or a list of tag names (got {value!r})")
    return tuple(dict.fromkeys(n.strip() for n in names))


def _list(mapping: dict[str, Any], key: str, where: Where) -> list[Any]:
    items = mapping.get(key) or []
    where.expect(isinstance(items, list), key, "a list")
    return items


def _test(item: Any, known: dict[str, tuple[TestKind, dict[str, bool]]], column: str | None, where: Where) -> TestDecl:
    """One entry of a data_tests list: `name` or `{name: {arguments: {...}, config: {severity: ...}}}`."""
    if isinstance(item, str):
        name, body = item, {}
    else:
        where.expect(isinstance(item, dict) and len(item) == 1, "", "a test name or {name: {arguments: ...}}")
        ((name, body),) = item.items()
        body = body or {}
    where.expect(name in known, "", f"one of {', '.join(known)} (got {name!r})")
    where.expect(
        isinstance(body, dict) and set(body) <= {"arguments", "config"},
        "",
        f"{name}'s `arguments:` and/or `config:` (dbt 1.10's layout: values, to, field... go under "
        f"arguments, severity under config)",
    )
    kind, wanted = known[name]
    args = body.get("arguments") or {}
    where.expect(
        isinstance(args, dict) and set(args) <= set(wanted),
        "arguments",
        f"{', '.join(wanted)} only" if wanted else f"none: {name} takes no arguments",
    )
    missing = [a for a, required in wanted.items() if required and not args.get(a)]
    where.expect(not missing, "arguments", f"{name} with {', '.join(missing)} (non-empty)")
    config = body.get("config") or {}
    where.expect(isinstance(config, dict) and set(config) <= {"severity"}, "config", "a mapping of severity only")
    written = str(config.get("severity", "error")).lower()  # dbt writes ERROR / warn
    where.expect(written in ("error", "warn"), "config.severity", "error or warn")
    severity: Literal["error", "warn"] = "warn" if written == "warn" else "error"
    columns = (column,) if column is not None else _names(args["combination_of_columns"], where)
    to = parse_call(str(args["to"]), str(where.at("arguments.to"))) if kind == "relationships" else None
    where.expect(kind != "accepted_values" or isinstance(args["values"], list), "arguments.values", "a list")
    values = tuple(args["values"]) if kind == "accepted_values" else ()
    return TestDecl(kind, columns, values, to, args.get("field"), severity, str(where))


def _names(value: Any, where: Where) -> tuple[str, ...]:
    where.expect(
        isinstance(value, list) and all(isinstance(v, str) for v in value),
        "arguments.combination_of_columns",
        "a list of column names",
    )
    return tuple(value)


@dataclass(frozen=True)
class Where:
    """A place in a YAML file (`models[0].columns[2].data_tests[0]`), for errors that say where to look."""

    path: Path
    place: str = ""

    def at(self, child: str) -> Where:
        return Where(self.path, f"{self.place}.{child}" if self.place else child)

    def expect(self, condition: bool, child: str, wanted: str) -> None:
        if not condition:
            place = self.at(child).place if child else self.place
            raise ModelError(f"{self.path}: {place or 'top level'}: expected {wanted}")

    def __str__(self) -> str:
        return f"{self.path}: {self.place}" if self.place else str(self.path)
