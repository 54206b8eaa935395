"""Models rendered with Jinja as dbt renders them, for the part of dbt a LessonSync build needs.

A model's file is rendered once, when the project loads (files only, no database), with:

- `{{ ref('<model>') }}` and `{{ source('lms', '<table>') }}`: the relations `analytics.<model>` and
  `lms.<table>`; each call is a dependency of the model, whatever the rendered SQL does with it;
- `{{ this }}`: the model's own relation, `analytics.<model>`;
- `{{ var('as_of') }}`: `getvariable('as_of')`, the DuckDB variable each build sets (build.py); models read it
  through the project's macro `as_of()` (dbt_like_sql/macros/as_of.sql), which under dbt casts a date or timestamp;
  a model that calls it is time-relative (`Rendered.reads_as_of`): rebuilt by a build with a new `as_of`, unless
  its `valid_until` (below) says its rows still hold;
  `{{ var('<name>', <default>) }}`: the variable of dbt_project.yml's `vars:`, else the default;
- `{{ config(materialized='table') }}` ('view', or 'incremental' with `unique_key=`): how the model is built,
  before its YAML's `config:`; `tags=` (a name or a list), added to its YAML's tags as dbt adds them;
  `meta={'lessonsync': {'valid_until': "<SQL>"}}` (dbt keeps `meta` as it is): for
  a time-relative model, an aggregate over its rows giving the first instant its result changes with `as_of`
  alone (build.py);
- `is_incremental()`: false, except in the second rendering of an incremental model (`render(...,
  incremental=True)`), the SQL a build runs when the model's table exists and only raw data changed since;
- the macros of `macros/*.sql` (`{% macro %}` blocks), callable from models and from each other;
- Jinja itself: `{% set %}`, `{% if %}`, `{% for %}`, `{% macro %}`, `{% do %}`, comments, filters.

Anything else of dbt (adapter, run_query, target, env_var, `return`, a package's macros such as dbt_utils.*)
is undefined here: rendering the model fails with its file and line, what was not understood and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from pipeline.analytics.config import Materialization, read_yaml, tag_names, unique_key_columns
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA, TableRef
from pipeline.analytics.refs import VARIABLES, qualified

MACROS_DIR = "macros"
BUILTINS = ("ref", "source", "this", "var", "config", "is_incremental")
MATERIALIZATIONS = ("table", "view", "incremental")
_CONFIG_KEYS = ("materialized", "unique_key", "tags", "meta")
_LESSONSYNC_META_KEYS = ("valid_until",)  # what the runner reads under config(meta={'lessonsync': {...}})
_NO_DEFAULT = object()
_MACRO_NAME = re.compile(r"\{%-?\s*macro\s+([A-Za-z_][A-Za-z0-9_]*)")
_WHAT_TO_DO = (
    "write the SQL out, put the logic in a macro of macros/, or build the models with dbt "
    "(LESSONSYNC_MODELS_RUNNER=dbt, docs/dbt.md)"
)


@dataclass(frozen=True)
class Relation:
    """What ref(), source() and `this` give a template: prints as the schema-qualified name, as in dbt."""

    schema: str
    identifier: str

    @property
    def name(self) -> str:
        return self.identifier

    def __str__(self) -> str:
        return qualified(TableRef(self.schema, self.identifier))


@dataclass(frozen=True)
class Rendered:
    sql: str
    calls: frozenset[TableRef]  # every ref() and source() the rendering called
    materialized: Materialization | None  # config(materialized=...), if the model set it
    unique_key: tuple[str, ...] = ()  # config(unique_key=...), if the model set it
    reads_as_of: bool = False  # the rendering called var('as_of')
    valid_until: str = ""  # config(meta={'lessonsync': {'valid_until': ...}}), if the model set it
    tags: tuple[str, ...] = ()  # config(tags=...), if the model set it


@dataclass
class _Calls:
    """What one rendering records: its references, its config() and whether it read `as_of`."""

    tables: set[TableRef] = field(default_factory=set)
    materialized: Materialization | None = None
    unique_key: tuple[str, ...] = ()
    reads_as_of: bool = False
    valid_until: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class _MacroFile:
    path: Path
    template: jinja2.Template | None  # None when the file does not parse
    names: tuple[str, ...]  # the macros it defines, in file order
    problem: str | None = None  # why it does not parse


class _Macro:
    """A project macro as templates call it: looked up when called, so that macros of different files can call
    each other (each file's module is made with every macro's name in scope)."""

    def __init__(self, name: str, defined: dict[str, Callable[..., Any]], problem: str | None) -> None:
        self.name, self._defined, self._problem = name, defined, problem

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._problem is not None:
            raise ModelError(self._problem)
        return self._defined[self.name](*args, **kwargs)


class Templates:
    """The Jinja environment of one models directory: its macros and dbt_project.yml's variables."""

    def __init__(self, root: Path) -> None:
        self._texts: dict[str, str] = {}  # template name (its path) -> text
        self._env = SandboxedEnvironment(
            loader=jinja2.FunctionLoader(lambda name: (self._texts[name], name, lambda: True)),
            undefined=jinja2.StrictUndefined,
            extensions=["jinja2.ext.do"],
            keep_trailing_newline=True,
        )
        self._macro_files = [self._macro_file(p) for p in sorted((root / MACROS_DIR).rglob("*.sql"))]
        self._macro_problems = self._check_macro_names()
        self._variables, self._variables_problem = _project_variables(root / "dbt_project.yml")

    @property
    def macro_names(self) -> list[str]:
        return sorted(name for f in self._macro_files for name in f.names)

    def render(self, text: str, path: Path, model: str, *, incremental: bool = False) -> Rendered:
        """The model's SQL rendered (`incremental`: with is_incremental() true); ModelError naming the file and
        line of what failed, and what to do."""
        self._texts[str(path)] = text
        shadowing = [problem for name, problem in self._macro_problems.items() if name in BUILTINS]
        if shadowing:  # dbt would call the project's macro where this runner calls its own: every model differs
            raise ModelError(f"{path}: {shadowing[0]}")
        calls = _Calls()
        context: dict[str, Any] = {
            "ref": lambda *args, **kwargs: self._ref(calls, args, kwargs),
            "source": lambda *args, **kwargs: self._source(calls, args, kwargs),
            "this": Relation(MODEL_SCHEMA, model),
            "var": lambda *args, **kwargs: self._var(calls, *args, **kwargs),
            "config": lambda *args, **kwargs: _config(calls, args, kwargs),
            "is_incremental": lambda: incremental,
        }
        try:
            context.update(self._macros(context))
            sql = self._env.get_template(str(path)).render(context)
        except jinja2.TemplateSyntaxError as error:
            where = f"{error.filename or path}:{error.lineno}"
            raise ModelError(f"{where}: {error.message}; fix the Jinja") from None
        except jinja2.UndefinedError as error:
            raise ModelError(
                f"{self._where(error, path)}: {error.message}: LessonSync's runner renders ref, source, this, "
                f"var, config, is_incremental and the macros of {MACROS_DIR}/ ({', '.join(self.macro_names) or 'none'}) "
                f"only; {_WHAT_TO_DO}"
            ) from None
        except ModelError as error:
            raise ModelError(f"{self._where(error, path)}: {error}") from None
        except Exception as error:  # a TypeError in a call, a division by zero, the sandbox refusing an attribute
            raise ModelError(
                f"{self._where(error, path)}: rendering failed: {type(error).__name__}: {error}; fix the Jinja"
            ) from None
        return Rendered(
            sql,
            frozenset(calls.tables),
            calls.materialized,
            calls.unique_key,
            calls.reads_as_of,
            calls.valid_until,
            calls.tags,
        )

    def _ref(self, calls: _Calls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Relation:
        if kwargs or len(args) != 1 or not isinstance(args[0], str):
            raise ModelError(
                f"ref({_arguments(args, kwargs)}): LessonSync's runner reads ref('<model>') only (no package, "
                f"no version); {_WHAT_TO_DO}"
            )
        calls.tables.add(TableRef(MODEL_SCHEMA, args[0]))
        return Relation(MODEL_SCHEMA, args[0])

    def _source(self, calls: _Calls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Relation:
        if kwargs or len(args) != 2 or not all(isinstance(a, str) for a in args):
            raise ModelError(f"source({_arguments(args, kwargs)}): expected source('{RAW_SCHEMA}', '<table>')")
        if args[0] != RAW_SCHEMA:
            raise ModelError(f"unknown source {args[0]!r}; the one source is {RAW_SCHEMA!r} (sources.yml)")
        calls.tables.add(TableRef(RAW_SCHEMA, args[1]))
        return Relation(RAW_SCHEMA, args[1])

    def _var(self, calls: _Calls, name: str, default: Any = _NO_DEFAULT) -> Any:
        if name in VARIABLES:
            calls.reads_as_of = calls.reads_as_of or name == "as_of"
            return VARIABLES[name]
        if self._variables_problem is not None:
            raise ModelError(self._variables_problem)
        if name in self._variables:
            return self._variables[name]
        if default is not _NO_DEFAULT:
            return default
        known = sorted({*VARIABLES, *self._variables})
        raise ModelError(
            f"unknown variable {name!r} (the variables are {known}); declare it under vars: in dbt_project.yml "
            f"or give a default: var({name!r}, <default>)"
        )

    def _macro_file(self, path: Path) -> _MacroFile:
        text = path.read_text(encoding="utf-8")
        self._texts[str(path)] = text
        try:
            tree = self._env.parse(text, str(path), str(path))
        except jinja2.TemplateSyntaxError as error:
            problem = f"{path}:{error.lineno}: {error.message}; fix the macro file"
            return _MacroFile(path, None, tuple(_MACRO_NAME.findall(text)), problem)
        names = tuple(m.name for m in tree.body if isinstance(m, nodes.Macro))
        return _MacroFile(path, self._env.get_template(str(path)), names)

    def _check_macro_names(self) -> dict[str, str]:
        """Why a macro cannot be called, by name: its file does not parse, it is defined twice, or it would
        replace one of dbt's functions (which this runner provides itself)."""
        problems: dict[str, str] = {}
        seen: dict[str, Path] = {}
        for macro_file in self._macro_files:
            for name in macro_file.names:
                if macro_file.problem is not None:
                    problems.setdefault(name, macro_file.problem)
                elif name in BUILTINS:
                    problems[name] = (
                        f"{macro_file.path}: the macro {name!r} would replace dbt's {name}(), which LessonSync's "
                        f"runner provides itself; rename the macro"
                    )
                elif name in seen and name not in problems:
                    problems[name] = (
                        f"{macro_file.path} and {seen[name]}: two macros named {name!r}; rename one, as dbt requires"
                    )
                seen.setdefault(name, macro_file.path)
        return problems

    def _macros(self, context: dict[str, Any]) -> dict[str, _Macro]:
        """The project's macros for one rendering: each file made a module in the model's context (so that a
        macro's ref() is the model's dependency), every macro callable by name."""
        defined: dict[str, Callable[..., Any]] = {}
        names = {name for f in self._macro_files for name in f.names if name not in BUILTINS}
        macros = {name: _Macro(name, defined, self._macro_problems.get(name)) for name in names}
        module_context = {**context, **macros}
        for macro_file in self._macro_files:
            if macro_file.template is None:
                continue
            module = macro_file.template.make_module(module_context)
            for name in macro_file.names:
                defined.setdefault(name, getattr(module, name))
        return macros

    def _where(self, error: BaseException, path: Path) -> str:
        """`model.sql:<line>`, and `(in macros/x.sql:<line>)` when the error is inside a macro: the template
        frames of the error's traceback (Jinja rewrites them to the templates' file names and lines)."""
        frames: list[tuple[str, int]] = []
        trace = error.__traceback__
        while trace is not None:
            name = trace.tb_frame.f_code.co_filename
            if name in self._texts:
                frames.append((name, trace.tb_lineno))
            trace = trace.tb_next
        model_lines = [line for name, line in frames if name == str(path)]
        where = f"{path}:{model_lines[0]}" if model_lines else str(path)
        if frames and frames[-1][0] != str(path):
            where += f" (in {frames[-1][0]}:{frames[-1][1]})"
        return where


def _config(calls: _Calls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    unknown = sorted(set(kwargs) - set(_CONFIG_KEYS))
    if args or unknown:
        given = ", ".join(unknown) or "positional arguments"
        raise ModelError(
            f"config({given}=...): LessonSync's runner reads config(materialized='table', 'view' or 'incremental', "
            f"unique_key=..., tags=..., meta=...) only; drop the rest, or {_WHAT_TO_DO}"
        )
    materialized = kwargs.get("materialized")
    if materialized is not None:
        if materialized not in MATERIALIZATIONS:
            raise ModelError(
                f"config(materialized={materialized!r}): LessonSync's runner builds a 'table', a 'view' or an "
                f"'incremental' table (no ephemeral, no materialized view); choose one, or {_WHAT_TO_DO}"
            )
        calls.materialized = materialized
    if "unique_key" in kwargs:
        calls.unique_key = unique_key_columns(kwargs["unique_key"], "config(unique_key=...)")
    if "tags" in kwargs:
        calls.tags = tuple(dict.fromkeys((*calls.tags, *tag_names(kwargs["tags"], "config(tags=...)"))))
    if "meta" in kwargs:
        calls.valid_until = _valid_until_in_meta(kwargs["meta"])
    return ""


def _valid_until_in_meta(meta: Any) -> str:
    """The `valid_until` expression of config(meta=...): dbt's free-form `meta`, of which LessonSync reads only
    its own key, `lessonsync`, and there only what it knows (a misspelt key would be silently ignored)."""
    if not isinstance(meta, dict):
        raise ModelError(f"config(meta={meta!r}): meta is a mapping (dbt's model meta); write meta={{...}}")
    ours = meta.get("lessonsync", {})
    unknown = sorted(set(ours) - set(_LESSONSYNC_META_KEYS)) if isinstance(ours, dict) else None
    if unknown is None or unknown:
        raise ModelError(
            f"config(meta={{'lessonsync': {ours!r}}}): LessonSync reads only "
            "{'valid_until': \"<SQL aggregate over the model's rows>\"} there; fix or drop it"
        )
    expression = ours.get("valid_until", "")
    if not isinstance(expression, str):
        raise ModelError(
            f"config(meta={{'lessonsync': {{'valid_until': {expression!r}}}}}): valid_until is SQL text, an aggregate "
            'over the model\'s rows giving a TIMESTAMPTZ, e.g. "min(expires_at)"; quote it'
        )
    return expression.strip()


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])


def _project_variables(path: Path) -> tuple[dict[str, Any], str | None]:
    """dbt_project.yml's `vars:` (global ones, and those scoped to the project's name), or why they cannot be
    read."""
    if not path.exists():
        return {}, None
    try:
        project = read_yaml(path)
    except ModelError as error:
        return {}, str(error)
    declared = project.get("vars") if isinstance(project, dict) else None
    if not isinstance(declared, dict):
        return {}, None
    scoped = declared.get(project.get("name"))
    variables = {k: v for k, v in declared.items() if not isinstance(v, dict)}
    if isinstance(scoped, dict):
        variables.update(scoped)
    return variables, None
