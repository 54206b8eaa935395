"""The instance config LessonSync writes into DAGSTER_HOME: SQLite by default, PostgreSQL storage when
LESSONSYNC_DAGSTER_POSTGRES_URL is set (naming the variable, never the URL), switched back and forth with
the setting, the shipped keys kept, a hand-edited file left alone, the password printed nowhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.storage.runs import SqliteRunStorage
from dagster_postgres import PostgresRunStorage

from pipeline.instance import POSTGRES_URL_VARIABLE, SHIPPED_CONFIG, ensure_dagster_home
from pipeline.settings import load_settings

PASSWORD = "pg-pass-" + "7f3a9c"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(POSTGRES_URL_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    return tmp_path / "home"


def test_unset_keeps_sqlite_and_set_adds_postgres_storage_by_variable(home: Path, monkeypatch: pytest.MonkeyPatch):
    ensure_dagster_home(load_settings())
    assert (home / "dagster.yaml").read_text() == SHIPPED_CONFIG.read_text()
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, SqliteRunStorage)

    monkeypatch.setenv(POSTGRES_URL_VARIABLE, f"postgresql://lessonsync:{PASSWORD}@db.internal:5432/dagster")
    ensure_dagster_home(load_settings())
    written = (home / "dagster.yaml").read_text()
    assert PASSWORD not in written
    config = yaml.safe_load(written)
    assert config["storage"] == {"postgres": {"postgres_url": {"env": POSTGRES_URL_VARIABLE}}}
    shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
    assert {key: config[key] for key in shipped} == shipped  # every shipped key survives
    assert os.environ[POSTGRES_URL_VARIABLE].startswith("postgresql+psycopg2://")  # dagster-postgres's driver

    monkeypatch.delenv(POSTGRES_URL_VARIABLE)
    ensure_dagster_home(load_settings())
    assert (home / "dagster.yaml").read_text() == SHIPPED_CONFIG.read_text()  # back to SQLite


def test_a_hand_edited_config_is_left_alone(home: Path, monkeypatch: pytest.MonkeyPatch):
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv(POSTGRES_URL_VARIABLE, f"postgresql://u:{PASSWORD}@h/db")
    ensure_dagster_home(load_settings())
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def test_the_instance_on_postgres_and_the_password_in_no_output(
    home: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
):
    env = {**os.environ, POSTGRES_URL_VARIABLE: postgres_url}
    script = (
        "from pipeline.instance import ensure_dagster_home; from pipeline.settings import load_settings; "
        "print(ensure_dagster_home(load_settings()))"
    )
    made = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == str(home.resolve()) and "postgresql" not in made.stdout + made.stderr
    password = postgres_url.split(":")[2].split("@")[0]
    assert password not in (home / "dagster.yaml").read_text()
    monkeypatch.setenv(POSTGRES_URL_VARIABLE, postgres_url)
    ensure_dagster_home(load_settings())
    with DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert instance.get_runs() == []  # a fresh database, migrated by dagster-postgres
