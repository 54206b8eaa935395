"""The checkout is a dg project: `dg check defs` loads the code location that pyproject.toml's [tool.dg] names
(the wheel installed outside the checkout is checked by tests/deploy/test_wheel_install.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_dg_check_defs_in_the_checkout(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LESSONSYNC_", "DAGSTER_HOME"))}
    env.update(VIRTUAL_ENV=str(bin_dir.parent), PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    env["DAGSTER_HOME"] = str(tmp_path)  # no instance of the developer's
    done = subprocess.run(
        [str(bin_dir / "dg"), "check", "defs"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "All definitions loaded successfully" in done.stdout + done.stderr
