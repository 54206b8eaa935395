"""Every setting honours a `.env` file, not only the environment: each Settings field read from `.env` with a
non-default value, and the code location `workspace.yaml` loads is built from them (freshness policy, shrink
check, models directory) while no module reads them at import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import typing
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from pipeline.settings import PARTS, Settings, load_settings

REPO = Path(__file__).resolve().parents[1]

# Values that are valid and differ from the default; fields not listed get one derived from their type, and a
# field whose type gives none fails the test, naming itself (so a new setting is covered when it is added).
EXAMPLES = {
    "base_url": ("http://platform.example:9000", "http://platform.example:9000"),
    "first_page": ("0", "0"),
    "answers_refetch": ("window", "window"),
    "log_level": ("WARNING", "WARNING"),
    "log_format": ("json", "json"),
    "duckdb_memory_limit": ("1GB", "1GB"),
    "analytics_as_of": ("2026-01-31T00:00:00Z", "2026-01-31T00:00:00Z"),
    "models_runner": ("dbt", "dbt"),
    "table_format": ("none", "none"),
    "nightly_cron": ("0 5 * * *", "0 5 * * *"),
    "lake_url": ("s3://lessonsync-lake/prod", "s3://lessonsync-lake/prod"),
    "schema_contract": ("freeze", "freeze"),
    "schema_contract_by_stream": ("active_lessons=discard_value", {"active_lessons": "discard_value"}),
}


def example(name: str, default: object, annotation: object) -> tuple[str, object]:
    """(text for .env, expected value) for field `name`."""
    if name in EXAMPLES:
        return EXAMPLES[name]
    kinds = {a for a in typing.get_args(annotation)} | {annotation}
    if SecretStr in kinds:
        return "an-example-secret", "an-example-secret"
    if Path in kinds:
        return "/tmp/lessonsync-env-example", Path("/tmp/lessonsync-env-example")
    if timedelta in kinds:
        return "PT7M", timedelta(minutes=7)
    if bool in kinds:
        return str(not default).lower(), not default
    if int in kinds:
        value = (default or 1) + 1
        return str(value), value
    if float in kinds:
        value = round((default or 1.0) * 0.5, 6)
        return str(value), value
    pytest.fail(f"Settings.{name}: add a valid non-default example to EXAMPLES in this test")


def plain(value: object) -> object:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_every_settings_field_is_read_from_a_dotenv_file(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("LESSONSYNC_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    lines, expected = [], {}
    for name, info in Settings.model_fields.items():
        text, value = example(name, info.default, info.annotation)
        lines.append(f"LESSONSYNC_{name.upper()}={text}")
        expected[name] = value
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    settings, defaults = load_settings(), Settings(_env_file=None)
    for name, value in expected.items():
        got = plain(getattr(settings, name))
        assert got != plain(getattr(defaults, name)), f"LESSONSYNC_{name.upper()} in .env was ignored"
        if value is not None:
            assert got == value, name


def test_each_part_carries_the_variables_it_names(tmp_path, monkeypatch):
    """Every part's settings (settings.client, .warehouse, ...) hold the values of the LESSONSYNC_* variables it is
    built from, each a non-default value from a .env file, so a part that read another variable shows here."""
    for name in list(os.environ):
        if name.startswith("LESSONSYNC_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    lines = [
        f"LESSONSYNC_{name.upper()}={example(name, info.default, info.annotation)[0]}"
        for name, info in Settings.model_fields.items()
        if name != "table_format"  # none: no Iceberg catalog, checked below with its default
    ]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    settings = load_settings()
    flat = dict(settings)
    parts = [
        settings.client,
        settings.sync,
        settings.warehouse,
        settings.lake,
        settings.receiver,
        settings.orchestration,
    ]
    assert [type(part) for part in parts] == list(PARTS)
    for part in parts:
        values = vars(part)
        for name in set(values) & set(flat):
            assert plain(values[name]) == plain(flat[name]), f"{type(part).__name__}.{name}"
    assert settings.client.page_cache_dir is None  # LESSONSYNC_PAGE_CACHE=false
    assert settings.warehouse.path == settings.data_dir / "warehouse.duckdb"
    assert settings.lake.location == "s3://lessonsync-lake/prod"
    assert settings.lake.iceberg_catalog == "an-example-secret"  # LESSONSYNC_ICEBERG_CATALOG_URL
    assert settings.receiver.inbox_path == settings.data_dir / "inbox.sqlite3"
    assert settings.orchestration.freshness == timedelta(hours=settings.freshness_hours)
    assert settings.orchestration.dagster_home == settings.data_dir / "dagster_home"


def _python(code: str, cwd: Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter, run in `cwd`, with no LESSONSYNC_* variable but `extra_env`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_")} | (extra_env or {})
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_code_location_is_built_from_dotenv_settings(tmp_path):
    """workspace.yaml's `pipeline.definitions:defs` passes load_settings() (so `.env`) to build_definitions: the
    freshness policy, the shrink check's threshold and the models directory follow it."""
    shutil.copytree(REPO / "dbt_like_sql", tmp_path / "models")
    (tmp_path / ".env").write_text(
        "LESSONSYNC_FRESHNESS_HOURS=50\nLESSONSYNC_MAX_DELETED_FRACTION=0.05\n"
        f"LESSONSYNC_MODELS_DIR={tmp_path / 'models'}\n"
    )
    code = (
        "from pipeline.definitions import defs; from dagster import AssetKey; "
        "g = defs.resolve_asset_graph(); "
        "print(g.get(AssetKey(['lms', 'answers'])).freshness_policy.fail_window.to_timedelta().total_seconds()); "
        "print(next(s.description for c in defs.asset_checks for s in c.check_specs if s.name == 'not_shrinking')); "
        "print(g.get(AssetKey(['analytics', 'lesson_funnel'])).metadata['sql'].value)"
    )
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    fail_after, shrink, sql = done.stdout.splitlines()
    assert float(fail_after) == 50 * 3600.0
    assert "at most 5% of the rows" in shrink
    assert sql == str(Path("models", "marts", "lesson_funnel.sql"))


def test_no_module_reads_settings_at_import(tmp_path):
    """A bad setting breaks building the code location, with the setting named, and nothing else: every module
    of pipeline.defs imports without reading the environment."""
    modules = sorted(
        ".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "pipeline" / "defs").rglob("*.py")
    )
    bad = {"LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL": "soon", "LESSONSYNC_FRESHNESS_HOURS": "-1"}
    done = _python(f"import importlib; [importlib.import_module(m) for m in {modules!r}]", tmp_path, bad)
    assert done.returncode == 0, done.stderr[-2000:]
    done = _python("import pipeline.definitions", tmp_path, bad)
    assert done.returncode != 0
    assert "LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL: " in done.stderr and "LESSONSYNC_FRESHNESS_HOURS: " in done.stderr
