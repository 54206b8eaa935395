"""Every third-party module pipeline/ imports is declared in pyproject.toml: one imported when its module loads is
a core dependency (the wheel with no extra runs `lessonsync sync`); one imported only inside a function (or at the
top of a module that is itself imported only inside functions) is a core dependency or belongs to an extra a
deployment installs (pipeline.extras.EXTRA_MODULES, or the simulator's), never to `dev` or `bench` alone.

Modules are mapped to distributions through the installed metadata (yaml -> PyYAML, jwt -> PyJWT), so nothing
arrives unnamed through another package (numpy through pandas)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement

from pipeline.extras import EXTRA_MODULES
from pipeline.simulator_extra import EXTRA_MODULES as SIMULATOR_MODULES

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipeline"
PROJECT = "lessonsync"
NOT_FOR_DEPLOYMENTS = frozenset({"dev", "bench"})  # extras for working on LessonSync, not for running it
MODULE_NAME = re.compile(r"pipeline(\.\w+)+")


@dataclass(frozen=True)
class Import:
    importer: str  # the pipeline module holding the statement
    target: str  # the module named (for `from a.b import c`: a.b.c when that is a module of pipeline, else a.b)
    line: int
    deferred: bool  # inside a function or under `if TYPE_CHECKING:`: not run when the importer loads

    @property
    def top(self) -> str:
        return self.target.split(".")[0]

    def where(self) -> str:
        return f"{self.importer.replace('.', '/')}.py:{self.line}"


def canonical(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def pipeline_modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PIPELINE.rglob("*.py"))}


def imports_of(importer: str, tree: ast.Module, modules: set[str]) -> Iterator[Import]:
    # A module with a module-level __getattr__ (a lazy facade, PEP 562) imports what it names under TYPE_CHECKING
    # when a name is first used, which is why anything imports it: those imports count as run when it loads.
    lazy = any(
        (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__getattr__" for t in node.targets))
        for node in tree.body
    )

    def visit(node: ast.AST, deferred: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer, alias.name, node.lineno, deferred)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                yield Import(importer, submodule if submodule in modules else node.module, node.lineno, deferred)
        for child in ast.iter_child_nodes(node):
            inside = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) or (
                isinstance(node, ast.If)
                and child in node.body
                and "TYPE_CHECKING" in ast.unparse(node.test)
                and not lazy
            )
            yield from visit(child, deferred or inside)

    yield from visit(tree, False)


def loaded_when_imported(modules: dict[str, ast.Module], imports: list[Import]) -> set[str]:
    """The pipeline modules that load at the top level of some entry point: those no statement imports (the code
    location, the CLI's commands, named by string), and whatever they import at their top level, with parents."""
    imported = {i.target for i in imports if i.top == "pipeline"}
    named = {
        node.value
        for tree in modules.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value)
    }
    loaded: set[str] = set()
    todo = [m for m in modules if m not in imported or m in named]
    while todo:
        module = todo.pop()
        if module in loaded or module not in modules:
            continue
        loaded.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:n]) for n in range(1, len(parts))]
        todo += [i.target for i in imports if i.importer == module and not i.deferred and i.top == "pipeline"]
    return loaded


@cache
def installed_distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distributions_of(module: str) -> frozenset[str]:
    """The distributions that install top-level `module` (an uninstalled one: its name with '-' for '_')."""
    return frozenset(canonical(d) for d in installed_distributions().get(module) or [module])


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """The core dependencies, and each extra's (its own requirements and those of the extras it names), as
    canonical distribution names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {canonical(Requirement(r).name) for r in project["dependencies"]}
    raw = {extra: [Requirement(r) for r in rs] for extra, rs in project["optional-dependencies"].items()}

    def expand(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
        names: set[str] = set()
        for requirement in raw[extra]:
            if canonical(requirement.name) == PROJECT:
                for inner in requirement.extras - seen:
                    names |= expand(inner, seen | {extra})
            else:
                names.add(canonical(requirement.name))
        return names

    return core, {extra: expand(extra) for extra in raw}


def third_party_imports() -> list[Import]:
    modules = pipeline_modules()
    imports = [i for name, tree in modules.items() for i in imports_of(name, tree, set(modules))]
    loaded = loaded_when_imported(modules, imports)
    return [
        Import(i.importer, i.target, i.line, i.deferred or i.importer not in loaded)
        for i in imports
        if i.top != "pipeline" and i.top not in sys.stdlib_module_names
    ]


def undeclared(imports: list[Import]) -> list[str]:
    core, extras = declared()
    extra_of = {m: extra for extra, ms in EXTRA_MODULES.items() for m in ms} | dict.fromkeys(
        SIMULATOR_MODULES, "simulator"
    )
    problems = []
    for i in imports:
        distributions = distributions_of(i.top)
        if distributions & core:
            continue
        extra = extra_of.get(i.top)
        if not i.deferred:
            problems.append(
                f"{i.where()}: imports {i.top} (distribution {'/'.join(sorted(distributions))}) when the module "
                "loads, but pyproject.toml's [project] dependencies do not declare it"
            )
        elif extra is None or extra in NOT_FOR_DEPLOYMENTS or not distributions & extras.get(extra, set()):
            problems.append(
                f"{i.where()}: imports {i.top} (distribution {'/'.join(sorted(distributions))}), declared neither "
                "in the core dependencies nor in the deployment extra pipeline.extras.EXTRA_MODULES maps it to"
            )
    return problems


def test_every_third_party_module_pipeline_imports_is_declared() -> None:
    problems = undeclared(third_party_imports())
    assert not problems, "\n".join(problems)


def test_every_extra_declares_the_modules_named_for_it() -> None:
    """pipeline.extras.EXTRA_MODULES, the modules `require_extra` looks for, are what the extra installs."""
    _, extras = declared()
    assert {
        module: extra
        for extra, modules in EXTRA_MODULES.items()
        for module in modules
        if not distributions_of(module) & extras.get(extra, set())
    } == {}


def test_the_walk_sees_top_level_and_deferred_imports() -> None:
    """The check can fail: numpy at module level, an extra's module inside a function or in a module that only a
    function imports, and a package no extra declares inside a function are each told apart."""
    imports = {(i.importer, i.top): i.deferred for i in third_party_imports()}
    assert imports[("pipeline.source.sweeps", "numpy")] is False
    assert imports[("pipeline.defs.analytics.dbt_runner", "dagster_dbt")] is True  # assets.py imports it in a function
    assert imports[("pipeline.webhooks.inbox_postgres", "psycopg2")] is True
    assert imports[("pipeline.defs.analytics.assets", "dagster")] is False
    made_up = [
        Import("pipeline.source.sweeps", "numpy_without_a_distribution", 1, False),
        Import("pipeline.cli.demo", "pandas", 1, True),
    ]
    assert len(undeclared(made_up)) == 2
