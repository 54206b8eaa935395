"""A host that only runs Dagster's daemon (or webserver), deployed with deploy/install.sh, uses PostgreSQL from
its first start: the install wrote the instance config into DAGSTER_HOME once (`python -m pipeline.instance
--postgres`, without the URL), and no LessonSync command runs on that host afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from dagster import DagsterInstance
from dagster_postgres import PostgresRunStorage

from pipeline.instance import POSTGRES_URL_VARIABLE, with_psycopg2_driver

BIN = Path(sys.executable).parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != POSTGRES_URL_VARIABLE and not k.startswith("LESSONSYNC_")}
    return {**env, "DAGSTER_HOME": str(home), **extra}


def _install_instance_config(home: Path, cwd: Path) -> None:
    """What deploy/install.sh runs with DAGSTER_HOME set: at image build, where no database URL is known."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.instance", "--postgres"],
        env=_env(home),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_daemon_alone_on_a_deployed_home_uses_postgres(tmp_path: Path, postgres_url: str) -> None:
    home = tmp_path / "dagster_home"
    _install_instance_config(home, tmp_path)
    url = with_psycopg2_driver(postgres_url)  # as docs/deploy.md asks of a URL Dagster reads itself
    env = _env(home, **{POSTGRES_URL_VARIABLE: url})

    info = subprocess.run(
        [str(BIN / "dagster"), "instance", "info"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert info.returncode == 0, info.stderr[-2000:]
    assert "PostgresRunStorage" in info.stdout and "SqliteRunStorage" not in info.stdout
    password = url.split(":")[2].split("@")[0]
    assert password not in info.stdout + info.stderr + (home / "dagster.yaml").read_text()

    daemon = subprocess.Popen(
        [str(BIN / "dagster-daemon"), "run", "--empty-workspace"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, stopped whole
    )
    try:
        os.environ[POSTGRES_URL_VARIABLE] = url
        with DagsterInstance.from_config(str(home)) as instance:
            assert isinstance(instance.run_storage, PostgresRunStorage)
            deadline = time.monotonic() + 90
            while not instance.get_daemon_heartbeats() and time.monotonic() < deadline:
                assert daemon.poll() is None, daemon.stderr.read()[-2000:] if daemon.stderr else ""
                time.sleep(0.5)
            assert instance.get_daemon_heartbeats(), "the daemon wrote no heartbeat to PostgreSQL within 90 s"
    finally:
        os.environ.pop(POSTGRES_URL_VARIABLE, None)
        stop_group(daemon)
    assert not list(home.glob("history")) and not list(home.glob("storage"))  # nothing went to SQLite


def test_without_the_url_a_deployed_home_stops_naming_the_variable(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    _install_instance_config(home, tmp_path)
    info = subprocess.run(
        [str(BIN / "dagster"), "instance", "info"],
        env=_env(home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert info.returncode != 0
    assert POSTGRES_URL_VARIABLE in info.stderr and "SqliteRunStorage" not in info.stdout


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process's group (started with start_new_session), SIGKILL to what is left after 30 s."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
