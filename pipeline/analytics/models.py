"""Discovery of the analyst models under dbt_like_sql/: one SELECT per `.sql` file (file name = model name),
its properties YAML beside it (config.py), and the raw tables it may read declared in `sources.yml`, all in
dbt's schema.

Loading is pure (files only, no database) and never fails for one model: a model that does not render
(templating.py), does not parse, reads an unknown table, has a broken YAML or sits in a dependency cycle is kept
with its `problem` (file, line, what to do), so that the code location loads and shows it as an asset whose build
fails (build.py) while every model not downstream of it builds. Its dependencies are what can still be read: the
rendered SQL's tables and the ref()/source() calls made, or, when it does not render, the calls written in it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import TypeVar

from pipeline.analytics.config import Materialization, ModelConfig, load_config
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import (
    MODEL_SCHEMA,
    RAW_SCHEMA,
    SqlReading,
    TableRef,
    check_known,
    read_sql,
    save_readings,
)
from pipeline.analytics.model_tests import ModelTest, resolve_tests
from pipeline.analytics.refs import calls_in_text
from pipeline.analytics.sources import load_sources
from pipeline.analytics.templating import MACROS_DIR, Rendered, Templates

# An installed wheel carries the models as package data beside this module (setup.py maps dbt_like_sql/ there);
# a checkout, editable install included, reads them where they are written, at the repository's root.
_PACKAGED_MODELS_DIR = Path(__file__).resolve().parent / "dbt_like_sql"
_CHECKOUT_MODELS_DIR = Path(__file__).resolve().parents[2] / "dbt_like_sql"
DEFAULT_MODELS_DIR = _PACKAGED_MODELS_DIR if _PACKAGED_MODELS_DIR.is_dir() else _CHECKOUT_MODELS_DIR
MODELS_DIR_ENV = "LESSONSYNC_MODELS_DIR"
MARTS_LAYER = "marts"
# What dbt writes inside the project (compiled SQL, installed packages, logs), and the macros: not models.
NOT_MODEL_DIRS = frozenset({"target", "dbt_packages", "logs", MACROS_DIR})
# Model names taken by LessonSync's own assets: analytics/published is the analysts' copy.
RESERVED_NAMES = frozenset({"published"})
_T = TypeVar("_T")


@dataclass(frozen=True)
class Model:
    name: str
    layer: str  # the directory under dbt_like_sql/: staging, marts
    sql_path: Path
    sql: str  # as it runs: the file rendered (templating.py); empty when it cannot be
    deps: tuple[TableRef, ...]
    materialized: Materialization
    publish: bool  # copied into the analysts' snapshot (and, for a mart, to Parquet)
    description: str
    columns: dict[str, str]
    tests: tuple[ModelTest, ...]
    code_text: str  # the .sql and .yml files as written, and the SQL rendered
    problem: str | None = None  # why the model cannot be built (file, line, what to do); its build fails
    incremental_sql: str = ""  # an incremental model's SQL rendered with is_incremental() true
    unique_key: tuple[str, ...] = ()  # an incremental model's key: the rows a build replaces
    time_relative: bool = False  # reads `as_of` (var('as_of')): the build's `as_of` is one of its inputs
    reads_clock: bool = False  # reads the clock (now(), current_date...) or randomness: every build rebuilds it
    # A time-relative model's aggregate over its own rows: the first instant at which its result changes with
    # `as_of` alone (NULL: none). A later build before that instant, its other inputs the same, keeps it (build.py).
    valid_until: str = ""
    tags: tuple[str, ...] = ()  # dbt's tags, its YAML's and then its config()'s: selection, not how it builds

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
    rejected: tuple[str, ...] = ()  # files that cannot be models at all (a name taken twice or reserved), and why

    @cached_property
    def marts(self) -> list[Model]:
        """Marts published as Parquet files."""
        return [m for m in self.models.values() if m.is_mart and m.publish]

    @cached_property
    def published(self) -> list[Model]:
        """Models copied into the analysts' snapshot database."""
        return [m for m in self.models.values() if m.publish]

    @cached_property
    def problems(self) -> dict[str, str]:
        """Each model that cannot be built, and why."""
        return {m.name: m.problem for m in self.models.values() if m.problem is not None}

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
    """Read every model under `root` (Settings.models_dir; None: dbt_like_sql/) and order it for building. Only
    a directory without any model is an error; a model's own problem is kept on the model (module docstring).
    A project is read once while none of its files changed (the definitions and the sync's models run share it)."""
    root = Path(root or DEFAULT_MODELS_DIR)
    files_now = _project_files(root)
    read = _read_projects.get(root)
    if read is not None and read[0] == files_now:
        return read[1]
    project = _read_project(root)
    _read_projects[root] = (files_now, project)
    return project


_read_projects: dict[Path, tuple[tuple[tuple[str, int, int], ...], AnalyticsProject]] = {}


def _project_files(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Each file a project is read from (models, YAML, macros, project files), with its mtime and size."""
    found = []
    for path in root.rglob("*"):
        parts = path.relative_to(root).parts[:-1]
        generated = bool(parts) and (parts[0] in NOT_MODEL_DIRS - {MACROS_DIR} or any(p.startswith(".") for p in parts))
        if path.is_file() and not generated:
            stat = path.stat()
            found.append((str(path.relative_to(root)), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(found))


def _read_project(root: Path) -> AnalyticsProject:
    files = sorted(p for p in root.rglob("*.sql") if p.is_file() and not _outside_models(p, root))
    if not files:
        raise ModelError(f"{root}: holds no .sql model; set {MODELS_DIR_ENV} to the models directory")
    try:
        sources, sources_problem = load_sources(root / "sources.yml"), None
    except ModelError as error:
        sources, sources_problem = {}, str(error)
    files, rejected = _one_file_per_name(files)
    names = {p.stem for p in files}
    templates = Templates(root)
    parsed = {p.stem: _load_model(p, root, sources, sources_problem, names, templates) for p in files}
    save_readings()
    order, parsed = _build_order(parsed, root)
    models = {name: parsed[name] for name in order}
    return AnalyticsProject(root, sources, models, tuple(rejected))


def _outside_models(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts[:-1]
    return bool(parts) and (parts[0] in NOT_MODEL_DIRS or any(part.startswith(".") for part in parts))


def _one_file_per_name(files: list[Path]) -> tuple[list[Path], list[str]]:
    """The files that can be models, and why each other one cannot: its name is reserved, or another file
    (the first in path order) already has it."""
    kept: dict[str, Path] = {}
    rejected: list[str] = []
    for path in files:
        if path.stem in RESERVED_NAMES:
            rejected.append(f"{path}: the model name {path.stem!r} is reserved (analytics/{path.stem}); rename it")
        elif path.stem in kept:
            rejected.append(f"{path} and {kept[path.stem]}: two models named {path.stem!r}; rename one")
        else:
            kept[path.stem] = path
    return list(kept.values()), rejected


def _load_model(
    path: Path,
    root: Path,
    sources: dict[str, str],
    sources_problem: str | None,
    model_names: set[str],
    templates: Templates,
) -> Model:
    text = path.read_text(encoding="utf-8")
    config_path = path.with_suffix(".yml")
    config_text = config_path.read_text(encoding="utf-8") if config_path.exists() else ""
    layer = path.parent.relative_to(root).parts[0] if path.parent != root else ""
    problems: list[str] = []
    config = _attempt(problems, lambda: load_config(config_path, path.stem)) or ModelConfig()
    rendered: Rendered | None = _attempt(problems, lambda: templates.render(text, path, path.stem))
    reading: SqlReading | None = None
    if rendered is None:
        found = calls_in_text(text)
    else:
        reading = read_sql(rendered.sql, path)
        found = set(rendered.calls) | reading.tables
        if reading.problem is not None:
            problems.append(reading.problem)
    chosen = rendered.materialized if rendered is not None else None
    materialized: Materialization = chosen or config.materialized or ("view" if layer == "staging" else "table")
    incremental = _incremental_rendering(text, path, templates, problems) if materialized == "incremental" else None
    if incremental is not None:
        found |= incremental.calls | incremental.reads
    deps = _known_tables(found, path, sources, sources_problem, model_names, problems)
    tests = _attempt(problems, lambda: resolve_tests(path.stem, config.tests, sources, model_names, config_path)) or ()
    unique_key = (rendered.unique_key if rendered is not None else ()) or config.unique_key
    if materialized == "incremental" and not unique_key:
        problems.append(
            f"{path}: an incremental model needs a unique_key (config(unique_key=...) in the SQL, or unique_key under "
            "config: in its YAML): the columns whose rows each build replaces; add it"
        )
    sql = rendered.sql if rendered is not None else ""
    incremental_sql = incremental.sql if incremental is not None else ""
    readings = [r for r in (reading, incremental.reading if incremental else None) if r is not None]
    reads_as_of = any(r is not None and r.reads_as_of for r in (rendered, incremental)) or any(
        r.reads_as_of for r in readings
    )
    valid_until = rendered.valid_until if rendered is not None else ""
    if valid_until and not reads_as_of:
        problems.append(
            f"{path}: config(meta={{'lessonsync': {{'valid_until': ...}}}}) is for a model that reads as_of() (a "
            "time-relative one); this one does not, so every build with the same inputs keeps it anyway: drop it"
        )
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
        # the SQL as rendered: a macro's change is the models' it changes
        "\0".join((text, config_text, sql, incremental_sql)),
        "; ".join(dict.fromkeys(problems)) or None,
        incremental_sql,
        unique_key,
        reads_as_of,
        any(r.reads_clock for r in readings),
        valid_until,
        tuple(dict.fromkeys((*config.tags, *(rendered.tags if rendered is not None else ())))),
    )


@dataclass(frozen=True)
class _Incremental:
    model: str
    sql: str
    calls: frozenset[TableRef]
    reads_as_of: bool  # var('as_of') called while it rendered
    reading: SqlReading

    @property
    def reads(self) -> frozenset[TableRef]:
        """The tables its SQL reads, the model's own ({{ this }}) left out."""
        return self.reading.tables - {TableRef(MODEL_SCHEMA, self.model)}


def _incremental_rendering(text: str, path: Path, templates: Templates, problems: list[str]) -> _Incremental | None:
    """An incremental model rendered with is_incremental() true: what a build runs once the table exists. It may
    read the model's own table ({{ this }}), which is no dependency."""
    rendered = _attempt(problems, lambda: templates.render(text, path, path.stem, incremental=True))
    if rendered is None:
        return None
    reading = read_sql(rendered.sql, path)
    if reading.problem is not None:
        problems.append(f"{reading.problem} (the SQL rendered with is_incremental() true)")
        return None
    return _Incremental(path.stem, rendered.sql, rendered.calls, rendered.reads_as_of, reading)


def _known_tables(
    found: set[TableRef],
    path: Path,
    sources: dict[str, str],
    sources_problem: str | None,
    model_names: set[str],
    problems: list[str],
) -> set[TableRef]:
    """The tables of `found` that are declared raw tables or other models; why each other one is not, added to
    `problems`."""
    known = set()
    for ref in sorted(found):
        if ref.schema == RAW_SCHEMA and sources_problem is not None:
            problems.append(sources_problem)
            continue
        try:
            check_known(ref, str(path), sources, model_names, self_name=path.stem)
        except ModelError as error:
            problems.append(str(error))
            continue
        known.add(ref)
    return known


def _attempt(problems: list[str], step: Callable[[], _T]) -> _T | None:
    """`step()`, or None with its ModelError added to `problems`."""
    try:
        return step()
    except ModelError as error:
        problems.append(str(error))
        return None


def _build_order(models: dict[str, Model], root: Path) -> tuple[list[str], dict[str, Model]]:
    """The models in build order. Models in a dependency cycle are kept with the cycle as their problem and
    without their references to each other, so that the rest still orders (and the asset graph has no cycle)."""
    while True:
        # A relationships test reads its target model, so the target is built (and swapped in) first too.
        graph = {
            name: {d.name for d in m.deps if d.schema == MODEL_SCHEMA}
            | {t.to.name for t in m.tests if t.to and t.to.schema == MODEL_SCHEMA and t.to.name != name}
            for name, m in models.items()
        }
        sorter = TopologicalSorter(graph)
        try:
            sorter.prepare()
            break
        except CycleError as error:
            cycle = error.args[1]
            message = f"{root}: models depend on each other in a cycle: {' -> '.join(cycle)}; break it"
            models = {**models, **{name: _out_of_cycle(models[name], set(cycle), message) for name in set(cycle)}}
    order: list[str] = []
    while sorter.is_active():  # staging before marts, by name within a level: stable, readable logs
        ready = sorted(sorter.get_ready(), key=lambda n: (models[n].layer != "staging", n))
        order.extend(ready)
        sorter.done(*ready)
    return order, models


def _out_of_cycle(model: Model, cycle: set[str], message: str) -> Model:
    def in_cycle(ref: TableRef | None) -> bool:
        return ref is not None and ref.schema == MODEL_SCHEMA and ref.name in cycle

    return replace(
        model,
        deps=tuple(d for d in model.deps if not in_cycle(d)),
        tests=tuple(t for t in model.tests if not in_cycle(t.to)),
        problem="; ".join(p for p in (model.problem, message) if p),
    )
