"""A persistent Dagster home inside the data directory (Settings.dagster_home) with the shipped dagster.yaml:
without it Dagster keeps runs, cursors and backfills in a temp folder and loses them on exit.

With LESSONSYNC_DAGSTER_POSTGRES_URL set, the config written there is the shipped one plus a `storage:
postgres:` block (dagster-postgres: runs, event logs, schedules, sensor cursors, backfills in PostgreSQL). The
block names the environment variable, never its value, so the password is in no file and no output."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.extras import require_extra
from pipeline.settings import Settings  # settings import nothing of Dagster; keep this module light

if TYPE_CHECKING:
    from dagster import DagsterInstance

SHIPPED_CONFIG = Path(__file__).with_name("dagster.yaml")
POSTGRES_URL_VARIABLE = "LESSONSYNC_DAGSTER_POSTGRES_URL"
POSTGRES_STORAGE = f"""
# Added by LessonSync because {POSTGRES_URL_VARIABLE} is set: runs, event logs and schedules (sensor cursors,
# ticks, backfills) live in PostgreSQL. The URL, password included, stays in the environment.
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL_VARIABLE}
"""

# The header of the config a deployment writes once (`python -m pipeline.instance --postgres`, run by
# deploy/install.sh): PostgreSQL for every process of the host, daemon and webserver included. Not one of the two
# files ensure_dagster_home switches between, so a process started without the variable fails naming it instead of
# falling back to SQLite.
DEPLOYED_HEADER = f"""# Written at install (deploy/install.sh): every Dagster process of this host stores its runs, event logs and
# schedules in PostgreSQL at the URL in {POSTGRES_URL_VARIABLE}; a process without the variable stops naming it.
"""

log = logging.getLogger(__name__)


def instance_config(postgres: bool) -> str:
    """The dagster.yaml LessonSync writes: the shipped file, plus Postgres storage when asked."""
    shipped = SHIPPED_CONFIG.read_text(encoding="utf-8")
    return shipped.rstrip("\n") + "\n" + POSTGRES_STORAGE if postgres else shipped


def deployed_instance_config() -> str:
    """The dagster.yaml of a deployed host: the shipped file plus the Postgres block, whatever the environment now."""
    return DEPLOYED_HEADER + instance_config(True)


def write_deployed_config(home: Path) -> Path:
    """Writes deployed_instance_config() into `home` (replacing any dagster.yaml there); needs dagster-postgres."""
    require_extra("postgres", "the PostgreSQL instance config")
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    config.write_text(deployed_instance_config(), encoding="utf-8")
    return config


def ensure_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME if set (Dagster's own variable), else the settings' Dagster home, with LessonSync's
    dagster.yaml: written if the home has none, or rewritten when it is one LessonSync wrote for the other
    storage (SQLite <-> Postgres). A dagster.yaml edited by hand is left alone."""
    home = Path(os.environ.get("DAGSTER_HOME") or settings.dagster_home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    postgres = _postgres_configured(settings)
    wanted = instance_config(postgres)
    config = home / "dagster.yaml"
    current = config.read_text(encoding="utf-8") if config.exists() else None
    if current is None or (current != wanted and current in (instance_config(False), instance_config(True))):
        config.write_text(wanted, encoding="utf-8")
    elif postgres and "storage:" not in current:
        log.warning(
            "%s is set but %s, edited by hand, has no storage block and is left as it is: add the one "
            "of docs/deploy.md to use PostgreSQL.",
            POSTGRES_URL_VARIABLE,
            config,
        )
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def print_source_logs_once(instance: DagsterInstance) -> None:
    """When `instance` sends `lessonsync.*` logs to the run's event log (the shipped dagster.yaml), Dagster's
    console logger prints them: keep them from the root handler too, or every line shows twice. The instance is
    the one the runs use (one instance a command: each costs its storage's setup)."""
    if "lessonsync" in set(instance.managed_python_loggers):
        logging.getLogger("lessonsync").propagate = False


def _postgres_configured(settings: Settings) -> bool:
    """Whether the settings ask for a Postgres instance. The URL is exported for Dagster's `env:` lookup (it
    may come from a .env file), with psycopg2 named as its driver."""
    url = settings.dagster_postgres_url
    if url is None or not url.get_secret_value().strip():
        return False
    require_extra("postgres", f"{POSTGRES_URL_VARIABLE} (set)", otherwise="or unset it to keep SQLite")
    os.environ[POSTGRES_URL_VARIABLE] = with_psycopg2_driver(url.get_secret_value().strip())
    return True


def with_psycopg2_driver(url: str) -> str:
    """postgresql://... -> postgresql+psycopg2://...: SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3,
    while dagster-postgres ships (and retries on the errors of) psycopg2."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg2://" + url.removeprefix(bare)
    return url
