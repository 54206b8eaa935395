"""A persistent Dagster home inside the project (default data/dagster_home) with the shipped dagster.yaml:
without it Dagster keeps runs, cursors and backfills in a temp folder and loses them on exit."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

SHIPPED_CONFIG = Path(__file__).with_name("dagster.yaml")


def ensure_dagster_home(data_dir: Path) -> Path:
    """DAGSTER_HOME if set, else <data_dir>/dagster_home; created with the shipped dagster.yaml if it has none."""
    home = Path(os.environ.get("DAGSTER_HOME") or data_dir / "dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copyfile(SHIPPED_CONFIG, home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def print_source_logs_once(home: Path) -> None:
    """When the instance in `home` sends `lessonsync.*` logs to the run's event log (the shipped dagster.yaml),
    Dagster's console logger prints them: keep them from the root handler too, or every line shows twice."""
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        managed = set(instance.managed_python_loggers)
    if "lessonsync" in managed:
        logging.getLogger("lessonsync").propagate = False


if __name__ == "__main__":  # `python -m pipeline.instance`: used by `make dev`
    print(ensure_dagster_home(Path(os.environ.get("LESSONSYNC_DATA_DIR", "data"))))
