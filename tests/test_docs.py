import ast
import re
from pathlib import Path

import yaml

from pipeline.contract.streams import stream_tables
from pipeline.docs import SETTINGS_TARGET, SOURCES_TARGET, TARGET, render, render_settings, render_sources
from pipeline.settings import PARTS, Settings


def test_tables_doc_is_current():
    assert TARGET.read_text() == render(), "docs/TABLES.md is stale: run `python -m pipeline.docs`"


def test_settings_doc_is_current():
    assert SETTINGS_TARGET.read_text() == render_settings(), "docs/settings.md is stale: run `python -m pipeline.docs`"


def test_every_setting_belongs_to_one_part_and_is_documented_once():
    named = [name for part in PARTS for name in part.SETTINGS]
    assert sorted(named) == sorted(Settings.model_fields), "each LESSONSYNC_* setting is named by exactly one part"
    rows = [line for line in render_settings().splitlines() if line.startswith("| `LESSONSYNC_")]
    assert len(rows) == len(Settings.model_fields)
    assert all(not line.endswith("|  |") for line in rows)


def test_sources_yml_is_current_and_lists_every_declared_table():
    current = SOURCES_TARGET.read_text()
    assert current == render_sources(current), "dbt_like_sql/sources.yml is stale: run `python -m pipeline.docs`"
    tables = yaml.safe_load(current)["sources"][0]["tables"]
    assert [t["name"] for t in tables] == [*stream_tables(), "certificate_events", "certificates"]


def test_generating_sources_yml_keeps_what_a_table_entry_adds():
    """Columns and tests written by hand for a table survive the next generation; the description is the contract's."""
    current = SOURCES_TARGET.read_text()
    entry = "      - name: groups\n        description: User groups, disabled ones included.\n"
    assert entry in current
    edited = current.replace(entry, entry.replace("disabled ones", "DISABLED ones") + "        tests: [exists]\n")
    groups = yaml.safe_load(render_sources(edited))["sources"][0]["tables"][3]
    assert groups == {"name": "groups", "description": "User groups, disabled ones included.", "tests": ["exists"]}


def test_every_column_is_documented():
    undocumented = [line for line in render().splitlines() if line.startswith("| ") and line.endswith("|  |")]
    assert undocumented == []


# Paths named in prose: a repo path under one of these folders, in the README, docs/*.md and pipeline's docstrings.
REPO = Path(__file__).resolve().parents[1]
NAMED_PATH = re.compile(r"(?<![\w./-])((?:pipeline|simulator|bench|tests|docs|dbt_like_sql)/[^\s`'\"),;:]*)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>{}*\[\]]")  # templates such as pipeline/defs/<domain>/ name no single file
OUTPUTS = ("bench/results/",)  # written by the benchmarks, git-ignored


def named_paths(text: str) -> set[str]:
    found = set()
    for match in NAMED_PATH.finditer(text):
        path = match.group(1).rstrip(".")
        if not PLACEHOLDER.search(path) and not path.startswith(OUTPUTS):
            found.add(path)
    return found


def docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return "\n".join(doc for node in nodes if (doc := ast.get_docstring(node)))


def prose() -> dict[str, str]:
    texts = {
        str(p.relative_to(REPO)): p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    }
    for source in sorted((REPO / "pipeline").rglob("*.py")):
        texts[str(source.relative_to(REPO))] = docstrings(source)
    return texts


def test_every_path_named_in_docs_and_docstrings_exists():
    texts = prose()
    assert "pipeline/settings.py" in named_paths(texts["docs/settings.md"])  # the paths are found at all
    missing = [
        f"{where}: {path}"
        for where, text in prose().items()
        for path in sorted(named_paths(text))
        if not (REPO / path).exists()
    ]
    assert missing == []


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for doc in [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            if not (doc.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert broken == []
