"""A model's YAML file (`<model>.yml` beside `<model>.sql`): description, materialization, column docs and
data tests, dbt style:

    description: One row per learner and lesson.
    materialized: table            # or view; default: view in staging/, table elsewhere
    publish: true                  # copied into data/analytics.duckdb (and marts to Parquet); default true
    columns:
      user_id:
        description: The learner.
        tests: [not_null, {relationships: {to: analytics.stg_users, field: user_id}}]
      status:
        tests: [{accepted_values: {values: [not-started, in-progress, succeeded, failed]}}]
    tests:                         # model-level tests
      - unique: {columns: [user_id, lesson_id]}

Every test takes an optional `severity: warn` (default `error`: the model is not swapped in and its
downstream models are skipped).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.analytics.errors import ModelError

TestKind = Literal["unique", "not_null", "accepted_values", "relationships"]
TEST_KINDS: tuple[TestKind, ...] = ("unique", "not_null", "accepted_values", "relationships")
Severity = Literal["error", "warn"]
Materialization = Literal["table", "view"]


@dataclass(frozen=True)
class TestDecl:
    """A data test as written in YAML; `to` is still a name here, resolved by the project loader."""

    kind: TestKind
    columns: tuple[str, ...]
    values: tuple[Any, ...] = ()
    to: str | None = None
    to_field: str | None = None
    severity: Severity = "error"
    where: str = ""  # where in the YAML file, for error messages


@dataclass(frozen=True)
class ModelConfig:
    description: str = ""
    materialized: Materialization | None = None
    publish: bool = True
    columns: dict[str, str] = field(default_factory=dict)  # column -> description
    tests: tuple[TestDecl, ...] = ()


def load_config(path: Path) -> ModelConfig:
    """The YAML beside a model; an absent file means no docs and no tests."""
    if not path.exists():
        return ModelConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ModelError(f"{path}: is not valid YAML: {error}") from None
    _expect(isinstance(raw, dict), path, "top level", "a mapping")
    unknown = set(raw) - {"description", "materialized", "publish", "columns", "tests"}
    _expect(not unknown, path, "top level",
            f"only description, materialized, publish, columns, tests (got {sorted(unknown)})")
    materialized = raw.get("materialized")
    _expect(materialized in (None, "table", "view"), path, "materialized", "'table' or 'view'")
    publish = raw.get("publish", True)
    _expect(isinstance(publish, bool), path, "publish", "true or false")
    columns_raw = raw.get("columns") or {}
    _expect(isinstance(columns_raw, dict), path, "columns", "a mapping of column name to its docs and tests")
    columns: dict[str, str] = {}
    tests: list[TestDecl] = []
    for column, spec in columns_raw.items():
        spec = spec or {}
        where = f"columns.{column}"
        _expect(isinstance(spec, dict), path, where, "a mapping with description and/or tests")
        columns[str(column)] = str(spec.get("description", "")).strip()
        for index, item in enumerate(spec.get("tests") or []):
            tests.append(_parse_test(item, path, f"{where}.tests[{index}]", default_column=str(column)))
    for index, item in enumerate(raw.get("tests") or []):
        tests.append(_parse_test(item, path, f"tests[{index}]", default_column=None))
    return ModelConfig(str(raw.get("description", "")).strip(), materialized, publish, columns, tuple(tests))


def _parse_test(item: Any, path: Path, where: str, default_column: str | None) -> TestDecl:
    if isinstance(item, str):
        kind, params = item, {}
    else:
        _expect(isinstance(item, dict) and len(item) == 1, path, where, "a test name or {name: {params}}")
        ((kind, params),) = item.items()
        params = params or {}
    _expect(kind in TEST_KINDS, path, where, f"one of {', '.join(TEST_KINDS)} (got {kind!r})")
    _expect(isinstance(params, dict), path, where, "parameters as a mapping")
    columns = params.get("columns") or params.get("column") or default_column
    columns = (columns,) if isinstance(columns, str) else tuple(columns or ())
    _expect(bool(columns), path, where, "a column (model-level tests name theirs with `column:` or `columns:`)")
    _expect(kind == "unique" or len(columns) == 1, path, where, f"{kind} on exactly one column")
    severity = params.get("severity", "error")
    _expect(severity in ("error", "warn"), path, where, "severity 'error' or 'warn'")
    values: tuple[Any, ...] = ()
    if kind == "accepted_values":
        values = tuple(params.get("values") or ())
        _expect(bool(values), path, where, "accepted_values with a non-empty `values` list")
    if kind == "relationships":
        _expect(bool(params.get("to")) and bool(params.get("field")), path, where, "relationships with `to` and `field`")
    return TestDecl(kind, columns, values, params.get("to"), params.get("field"), severity, f"{path}: {where}")


def _expect(condition: bool, path: Path, where: str, wanted: str) -> None:
    if not condition:
        raise ModelError(f"{path}: {where}: expected {wanted}")
