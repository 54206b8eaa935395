"""The models' lineage is read from the cache file while the SQL is unchanged: a process that loads the code
location then needs no SQL parser (sqlglot stays unimported); a changed file is parsed again, and a cache file that
cannot be read or written only costs the parse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.analytics import lineage as lineage_module
from pipeline.analytics.lineage import SqlReading, TableRef, reading_cache
from pipeline.analytics.models import DEFAULT_MODELS_DIR, AnalyticsProject, load_project

# In a process of its own: the models' lineage of the code location as loaded, and whether sqlglot was imported.
LOAD_DEFINITIONS = """
import json, sys
from pipeline.settings import load_settings
from pipeline.sync import definitions_for
from pipeline.analytics.models import load_project
settings = load_settings()
definitions_for(settings).resolve_asset_graph()
project = load_project(settings.models_dir)
print(json.dumps({
    "sqlglot_imported": "sqlglot" in sys.modules,
    "models": {
        m.name: [sorted(map(str, m.deps)), m.problem, m.time_relative, m.reads_clock]
        for m in project.models.values()
    },
}))
"""


def load_in_a_process(cache_dir: Path) -> dict[str, object]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir)}
    done = subprocess.run([sys.executable, "-c", LOAD_DEFINITIONS], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return loaded


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's reading cache in a directory of the test's own (its lessonsync/ directory returned), fresh
    before and after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "lessonsync"
    reading_cache.cache_clear()
    yield directory
    reading_cache.cache_clear()


def lineage(project: AnalyticsProject) -> dict[str, tuple[object, ...]]:
    return {m.name: (m.deps, m.problem, m.time_relative, m.reads_clock) for m in project.models.values()}


def test_a_second_process_reads_the_lineage_from_the_cache_without_sqlglot(tmp_path: Path) -> None:
    first = load_in_a_process(tmp_path / "cache")
    assert first["sqlglot_imported"] is True  # nothing cached yet: every model parsed
    assert (tmp_path / "cache" / "lessonsync" / "lineage.json").is_file()
    second = load_in_a_process(tmp_path / "cache")
    assert second["sqlglot_imported"] is False
    assert second["models"] == first["models"]
    models = first["models"]
    assert isinstance(models, dict) and models["certificates"][2] is True  # reads as_of, from the cache too
    assert "lms.active_lessons" in models["stg_active_lessons"][0]


def test_a_changed_model_is_parsed_again(tmp_path: Path, own_cache: Path) -> None:
    models_dir = Path(shutil.copytree(DEFAULT_MODELS_DIR, tmp_path / "dbt_like_sql"))
    model = models_dir / "marts" / "lesson_funnel.sql"
    assert TableRef("analytics", "stg_lessons") in load_project(models_dir).models["lesson_funnel"].deps
    assert (own_cache / "lineage.json").is_file()
    model.write_text("select id from lms.categories")
    reading_cache.cache_clear()  # as a new process: the file, not this process's memory
    changed = load_project(models_dir).models["lesson_funnel"]
    assert changed.deps == (TableRef("lms", "categories"),)


def test_a_cached_problem_is_reported_as_when_parsed(
    tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models_dir = Path(shutil.copytree(DEFAULT_MODELS_DIR, tmp_path / "dbt_like_sql"))
    broken = models_dir / "marts" / "broken.sql"
    broken.write_text("select * from answers; select 1")
    parsed = load_project(models_dir).models["broken"].problem
    assert parsed is not None and str(broken) in parsed and "2 statements" in parsed
    reading_cache.cache_clear()
    monkeypatch.setattr(lineage_module, "_parsed_reading", _no_parse)
    assert _read_again(models_dir).models["broken"].problem == parsed


def test_an_unreadable_cache_file_is_replaced_and_the_lineage_is_the_parsed_one(own_cache: Path) -> None:
    expected = lineage(_read_again(DEFAULT_MODELS_DIR))
    keys = json.loads((own_cache / "lineage.json").read_text()).keys()
    entries_of_another_shape = json.dumps({key: {"tables": 3, "problem": None} for key in keys})
    for garbage in ("{not json", '["a list"]', entries_of_another_shape):
        (own_cache / "lineage.json").write_text(garbage)
        reading_cache.cache_clear()
        assert lineage(_read_again(DEFAULT_MODELS_DIR)) == expected
        assert isinstance(json.loads((own_cache / "lineage.json").read_text()), dict)


def test_a_cache_directory_that_cannot_be_written_costs_only_the_parse(own_cache: Path) -> None:
    own_cache.parent.mkdir(parents=True, exist_ok=True)
    own_cache.write_text("a file where the directory should be")
    reading_cache.cache_clear()
    assert lineage(_read_again(DEFAULT_MODELS_DIR)) == lineage(load_project(DEFAULT_MODELS_DIR))
    assert own_cache.read_text() == "a file where the directory should be"


def _no_parse(sql: str, path: Path) -> SqlReading:
    raise AssertionError(f"{path} was parsed although its reading is cached")


def _read_again(root: Path) -> AnalyticsProject:
    """The project read from its files again (load_project keeps a read project while its files are unchanged)."""
    from pipeline.analytics import models

    models._read_projects.pop(root, None)
    return load_project(root)
