"""Discovery of the analyst models under dbt_like_sql/: one SELECT per `.sql` file (file name = model name),
its properties YAML beside it (config.py), and the raw tables it may read declared in `sources.yml`, all in
dbt's schema.

Loading is pure (files only, no database): a model that reads an unknown table, a broken YAML test or a
dependency cycle fails here, when Dagster loads the code location, with the file and the table named.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from pipeline.analytics.config import Materialization, load_config
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import (
    MODEL_SCHEMA,
    TableRef,
    check_known,
    parse_select,
    referenced_tables,
)
from pipeline.analytics.model_tests import ModelTest, resolve_tests
from pipeline.analytics.refs import compile_sql
from pipeline.analytics.sources import load_sources

# An installed wheel carries the models as package data beside this module (setup.py maps dbt_like_sql/ there);
# a checkout, editable install included, reads them where they are written, at the repository's root.
_PACKAGED_MODELS_DIR = Path(__file__).resolve().parent / "dbt_like_sql"
_CHECKOUT_MODELS_DIR = Path(__file__).resolve().parents[2] / "dbt_like_sql"
DEFAULT_MODELS_DIR = _PACKAGED_MODELS_DIR if _PACKAGED_MODELS_DIR.is_dir() else _CHECKOUT_MODELS_DIR
MODELS_DIR_ENV = "LESSONSYNC_MODELS_DIR"
MARTS_LAYER = "marts"
# What dbt writes inside the project (compiled SQL, installed packages, logs): not models.
DBT_OUTPUT_DIRS = frozenset({"target", "dbt_packages", "logs"})


@dataclass(frozen=True)
class Model:
    name: str
    layer: str  # the directory under dbt_like_sql/: staging, marts
    sql_path: Path
    sql: str  # as it runs: the file with its ref() and source() compiled to table names (refs.py)
    deps: tuple[TableRef, ...]
    materialized: Materialization
    publish: bool  # copied into the analysts' snapshot (and, for a mart, to Parquet)
    description: str
    columns: dict[str, str]
    tests: tuple[ModelTest, ...]
    code_text: str  # the .sql and .yml files as written

    @property
    def is_mart(self) -> bool:
        return self.layer == MARTS_LAYER

    @property
    def code_version(self) -> str:
        """Changes whenever the SQL or the YAML changes, so the UI can flag stale materializations."""
        return hashlib.sha256(self.code_text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class AnalyticsProject:
    root: Path
    sources: dict[str, str]  # raw table in schema lms -> description
    models: dict[str, Model]  # in build order: every model after the models it reads

    @cached_property
    def marts(self) -> list[Model]:
        """Marts published as Parquet files."""
        return [m for m in self.models.values() if m.is_mart and m.publish]

    @cached_property
    def published(self) -> list[Model]:
        """Models copied into the analysts' snapshot database."""
        return [m for m in self.models.values() if m.publish]

    def in_build_order(self, names: Iterable[str]) -> list[Model]:
        wanted = set(names)
        return [m for m in self.models.values() if m.name in wanted]

    def downstream_of(self, name: str) -> set[str]:
        """Models that read `name`, directly or not."""
        found: set[str] = set()
        for model in self.models.values():  # build order: a reader comes after what it reads
            if any(d.schema == MODEL_SCHEMA and (d.name == name or d.name in found) for d in model.deps):
                found.add(model.name)
        return found


def load_project(root: Path | None = None) -> AnalyticsProject:
    """Read every model under `root` (Settings.models_dir; None: dbt_like_sql/), validate it, and order it for
    building."""
    root = Path(root or DEFAULT_MODELS_DIR)
    sources = load_sources(root / "sources.yml")
    files = sorted(p for p in root.rglob("*.sql") if p.is_file() and not _dbt_output(p, root))
    if not files:
        raise ModelError(f"{root}: holds no .sql model; set {MODELS_DIR_ENV} to the models directory")
    _refuse_duplicate_names(files)
    names = {p.stem for p in files}
    parsed = {p.stem: _load_model(p, root, sources, names) for p in files}
    order = _build_order(parsed, root)
    models = {name: parsed[name] for name in order}
    return AnalyticsProject(root, sources, models)


def _dbt_output(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts[:-1]
    return bool(parts) and (parts[0] in DBT_OUTPUT_DIRS or any(part.startswith(".") for part in parts))


def _refuse_duplicate_names(files: list[Path]) -> None:
    seen: dict[str, Path] = {}
    for path in files:
        if path.stem in seen:
            raise ModelError(f"{path} and {seen[path.stem]}: two models named {path.stem!r}; rename one")
        seen[path.stem] = path


def _load_model(path: Path, root: Path, sources: dict[str, str], model_names: set[str]) -> Model:
    text = path.read_text(encoding="utf-8")
    sql = compile_sql(text, path)
    deps = referenced_tables(parse_select(sql, path), path)
    for ref in sorted(deps):
        check_known(ref, str(path), sources, model_names, self_name=path.stem)
    config_path = path.with_suffix(".yml")
    config = load_config(config_path, path.stem)
    layer = path.parent.relative_to(root).parts[0] if path.parent != root else ""
    tests = resolve_tests(path.stem, config.tests, sources, model_names, config_path)
    materialized = config.materialized or ("view" if layer == "staging" else "table")
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else ""
    return Model(
        path.stem,
        layer,
        path,
        sql,
        tuple(sorted(deps)),
        materialized,
        config.publish,
        config.description,
        config.columns,
        tests,
        text + "\0" + config_text,
    )


def _build_order(models: dict[str, Model], root: Path) -> list[str]:
    # A relationships test reads its target model, so the target is built (and swapped in) first too.
    graph = {
        name: {d.name for d in m.deps if d.schema == MODEL_SCHEMA}
        | {t.to.name for t in m.tests if t.to and t.to.schema == MODEL_SCHEMA and t.to.name != name}
        for name, m in models.items()
    }
    sorter = TopologicalSorter(graph)
    try:
        sorter.prepare()
    except CycleError as error:
        cycle = " -> ".join(error.args[1])
        raise ModelError(f"{root}: models depend on each other in a cycle: {cycle}; break it") from None
    order: list[str] = []
    while sorter.is_active():  # staging before marts, by name within a level: stable, readable logs
        ready = sorted(sorter.get_ready(), key=lambda n: (models[n].layer != "staging", n))
        order.extend(ready)
        sorter.done(*ready)
    return order
