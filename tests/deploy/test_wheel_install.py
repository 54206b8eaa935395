"""LessonSync installed the way production installs it: deploy/install.sh (the Dockerfile's commands) installs the
wheel (built once per session by deploy/build_wheel.sh, which install.sh runs on a checkout) with its default
extras, not editable, into a new virtual environment; from a directory that is not the checkout, that install syncs
a tiny simulated platform exactly (the SQL models found inside the wheel), loads its definitions with `dagster
definitions validate` and `dg check defs`, holds no simulator, and its published snapshot opens in the oldest
DuckDB the README promises (1.4), in a virtual environment of its own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from stack_helpers import assert_warehouse_equals_platform
from wheel_helpers import UV, install, outside_env

from pipeline.analytics.models import load_project
from pipeline.stack import Stack, local_stack

pytestmark = pytest.mark.slow

OLDEST_DUCKDB = "1.4.*"  # README: "DuckDB 1.4 or newer opens data/analytics.duckdb"


@dataclass(frozen=True)
class Installed:
    venv: Path
    stack: Stack
    cwd: Path  # outside the checkout
    env: dict[str, str]  # no checkout, no LessonSync or Dagster setting of the caller; the stack's settings
    sync: subprocess.CompletedProcess[str]

    def run(self, *args: str, cwd: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            env={**self.env, **extra},
            cwd=cwd or self.cwd,
            capture_output=True,
            text=True,
            timeout=600,
        )


def test_installed_like_production(tmp_path: Path, lessonsync_wheel: Path, dev_constraints: Path) -> None:
    """One test, so that one install serves every check whichever worker (pytest-xdist) runs it."""
    with installed_from_the_wheel(tmp_path, lessonsync_wheel, dev_constraints) as installed:
        check_the_sync_is_exact_from_outside_the_checkout(installed)
        check_the_wheel_holds_pipeline_and_its_models_and_no_simulator(installed)
        check_dagster_and_dg_load_the_installed_definitions(installed, tmp_path)
        check_the_image_command_serves_the_code_location(installed)
        check_the_published_snapshot_opens_in_the_oldest_duckdb_promised(installed, tmp_path)


@contextmanager
def installed_from_the_wheel(tmp_path: Path, wheel: Path, constraints: Path) -> Iterator[Installed]:
    root = tmp_path / "wheel"
    root.mkdir()
    venv = root / "venv"
    install(wheel, venv, constraints)  # the script's default extras
    cwd = root / "elsewhere"
    cwd.mkdir()
    with local_stack(root / "data", scale="tiny") as stack:
        stack.advance(hours=48)
        run_env = {**outside_env(), **stack.run_env()}
        sync = subprocess.run(
            [str(venv / "bin" / "lessonsync"), "sync"],
            env=run_env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=600,
        )
        yield Installed(venv, stack, cwd, run_env, sync)


def check_the_sync_is_exact_from_outside_the_checkout(installed: Installed) -> None:
    assert installed.sync.returncode == 0, (installed.sync.stdout + installed.sync.stderr)[-3000:]
    assert "sync succeeded" in installed.sync.stdout
    assert_warehouse_equals_platform(installed.stack)
    marts = json.loads((installed.stack.data_dir / "marts" / "_manifest.json").read_text())["marts"]
    assert set(marts) == {m.name for m in load_project().marts}  # every model, read from the wheel
    assert list(installed.cwd.iterdir()) == []  # nothing written where it ran


def check_the_wheel_holds_pipeline_and_its_models_and_no_simulator(installed: Installed) -> None:
    code = (
        "import importlib.util, pipeline; from pipeline.analytics.models import DEFAULT_MODELS_DIR as d; "
        "print(pipeline.__file__); print(d); "
        "print(importlib.util.find_spec('simulator') or importlib.util.find_spec('fastapi'))"
    )
    done = installed.run("python", "-c", code)
    assert done.returncode == 0, done.stderr[-2000:]
    package, models, simulator = done.stdout.splitlines()
    site_packages = str(installed.venv / "lib")
    assert package.startswith(site_packages) and models.startswith(site_packages)
    assert models.endswith("pipeline/analytics/dbt_like_sql")
    assert simulator == "None"


def check_dagster_and_dg_load_the_installed_definitions(installed: Installed, tmp_path: Path) -> None:
    validate = installed.run("dagster", "definitions", "validate", "-m", "pipeline.definitions")
    assert validate.returncode == 0, (validate.stdout + validate.stderr)[-3000:]
    assert "Validation successful" in validate.stdout + validate.stderr

    # dg reads a project directory holding the root module: the installed package, linked (docs/deploy.md).
    project = tmp_path / "dg_project"
    project.mkdir()
    (project / "dg.toml").write_text(
        'directory_type = "project"\n\n[project]\nroot_module = "pipeline"\n'
        'code_location_target_module = "pipeline.definitions"\ncode_location_name = "lessonsync"\n'
    )
    site_packages = next((installed.venv / "lib").glob("python3.*/site-packages"))
    (project / "pipeline").symlink_to(site_packages / "pipeline")
    path = f"{installed.venv / 'bin'}{os.pathsep}{installed.env['PATH']}"
    check = installed.run("dg", "check", "defs", cwd=project, VIRTUAL_ENV=str(installed.venv), PATH=path)
    assert check.returncode == 0, (check.stdout + check.stderr)[-3000:]
    assert "All definitions loaded successfully" in check.stdout + check.stderr


def check_the_image_command_serves_the_code_location(installed: Installed) -> None:
    """The Dockerfile's CMD, `dagster code-server start ... -m pipeline.definitions`, answers a gRPC health check."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = ["dagster", "code-server", "start", "-h", "127.0.0.1", "-p", str(port), "-m", "pipeline.definitions"]
    server = subprocess.Popen(
        [str(installed.venv / "bin" / command[0]), *command[1:]],
        env=installed.env,
        cwd=installed.cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: the gRPC server it starts goes with it
    )
    try:
        # The port accepts connections once the definitions are loaded; a health check (a CLI paying Dagster's
        # imports) before then would only be repeated.
        deadline = time.monotonic() + 120
        while not port_accepts(port) and time.monotonic() < deadline:
            assert server.poll() is None, "the code server exited"
            time.sleep(0.2)
        while True:
            check = installed.run("dagster", "api", "grpc-health-check", "-p", str(port))
            if check.returncode == 0 or time.monotonic() > deadline:
                break
            assert server.poll() is None, "the code server exited"
            time.sleep(1)
        assert check.returncode == 0, (check.stdout + check.stderr)[-2000:]
    finally:
        stop_group(server)


def check_the_published_snapshot_opens_in_the_oldest_duckdb_promised(installed: Installed, tmp_path: Path) -> None:
    reader = tmp_path / "duckdb14"
    for command in (
        [str(UV), "venv", "--quiet", "--python", "3.11", str(reader)],
        [str(UV), "pip", "install", "--quiet", "--python", str(reader / "bin" / "python"), f"duckdb=={OLDEST_DUCKDB}"],
    ):
        done = subprocess.run(command, env=outside_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    marts = [m.name for m in load_project().published]
    code = (
        "import duckdb, json, sys; c = duckdb.connect(sys.argv[1], read_only=True); "
        "print(json.dumps([duckdb.__version__, {t: c.execute(f'SELECT count(*) FROM main.\"{t}\"').fetchone()[0] "
        "for t in json.loads(sys.argv[2])}]))"
    )
    snapshot = installed.stack.data_dir / "analytics.duckdb"
    done = subprocess.run(
        [str(reader / "bin" / "python"), "-c", code, str(snapshot), json.dumps(marts)],
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    version, rows = json.loads(done.stdout)
    assert version.startswith("1.4.")
    import duckdb

    with duckdb.connect(str(snapshot), read_only=True) as conn:
        expected = {t: conn.execute(f'SELECT count(*) FROM main."{t}"').fetchone()[0] for t in marts}
    assert rows == expected and any(rows.values())


def port_accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the process's group (started with start_new_session), SIGKILL to what is left after 30 s."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
