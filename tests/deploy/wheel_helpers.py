"""Installing LessonSync's wheel the way production does, for the tests of tests/deploy/: deploy/install.sh into a
new virtual environment, with the extras a test names, run with an environment that holds nothing of the checkout
or the caller's LessonSync and Dagster settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def outside_env() -> dict[str, str]:
    drop = ("LESSONSYNC_", "DAGSTER_HOME", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def build_wheel(out_dir: Path) -> Path:
    """deploy/build_wheel.sh (what install.sh runs on a checkout): the wheel's path."""
    done = subprocess.run(
        ["sh", str(REPO / "deploy" / "build_wheel.sh"), str(REPO), str(out_dir)],
        env={**outside_env(), "UV": str(UV)},
        cwd=out_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return Path(done.stdout.splitlines()[-1])


def dev_versions(path: Path) -> Path:
    """The dev venv's versions as a constraints file: the installed wheel gets the versions the suite runs with,
    all of them in uv's cache (make installs them with uv), so the install needs no index."""
    done = subprocess.run(
        [str(UV), "pip", "freeze", "--exclude-editable", "--python", sys.executable],
        env=outside_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    path.write_text(done.stdout)
    return path


def install(source: Path, venv: Path, constraints: Path, extras: str | None = None) -> None:
    """deploy/install.sh SOURCE VENV [EXTRAS] (None: the script's default), the dev venv's versions as constraints;
    from uv's cache alone first, from the index only when the cache lacks something. Run beside VENV, outside the
    checkout (whose pyproject.toml uv would read for settings)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    args = ["sh", str(REPO / "deploy" / "install.sh"), str(source), str(venv), *([] if extras is None else [extras])]
    env = {**outside_env(), "UV": str(UV), "PYTHON": "3.11", "UV_CONSTRAINT": str(constraints)}

    def attempt(**more: str) -> subprocess.CompletedProcess[str]:
        shutil.rmtree(venv, ignore_errors=True)
        return subprocess.run(args, env={**env, **more}, cwd=venv.parent, capture_output=True, text=True, timeout=600)

    done = attempt(UV_OFFLINE="1")
    if done.returncode != 0:
        done = attempt()
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
