"""Data tests of a model (declared in its YAML) with their targets resolved; each is a Dagster asset check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.analytics.config import TestDecl
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import TableRef, check_known


@dataclass(frozen=True)
class ModelTest:
    """A data test on a model, with `to` resolved to a table; `name` is its Dagster asset-check name."""

    model: str
    kind: str
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    to: TableRef | None
    to_field: str | None
    severity: str
    where: str

    @property
    def name(self) -> str:
        target = f"__{self.to.name}" if self.to else ""
        return f"{self.kind}__{'__'.join(self.columns)}{target}"

    @property
    def description(self) -> str:
        cols = ", ".join(self.columns)
        if self.kind == "accepted_values":
            return f"{cols} takes only the values {', '.join(map(str, self.values))} (or null)"
        if self.kind == "relationships":
            return f"every non-null {cols} exists as {self.to}.{self.to_field}"
        if self.kind == "unique":
            return f"no two rows share ({cols})"
        return f"{cols} is never null"


def resolve_tests(
    model: str, decls: Iterable[TestDecl], sources: dict[str, str], models: set[str], config_path: Path
) -> tuple[ModelTest, ...]:
    """The model's tests with `to` checked against the known tables, and no test declared twice."""
    tests = tuple(_resolve(model, decl, sources, models) for decl in decls)
    _refuse_duplicates(tests, config_path)
    return tests


def _resolve(model: str, decl: TestDecl, sources: dict[str, str], models: set[str]) -> ModelTest:
    if decl.to is not None:
        check_known(decl.to, decl.where, sources, models, self_name="")
    return ModelTest(model, decl.kind, decl.columns, decl.values, decl.to, decl.to_field, decl.severity, decl.where)


def _refuse_duplicates(tests: tuple[ModelTest, ...], config_path: Path) -> None:
    names = [t.name for t in tests]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ModelError(f"{config_path}: the same test is declared twice: {', '.join(duplicates)}; merge them")
