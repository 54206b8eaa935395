"""The simulator is an optional extra: without it (its web framework missing), the commands that need it stop
with the install command instead of a traceback, and the demo stops before touching its data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# `fastapi` set to None in sys.modules: importing it raises ModuleNotFoundError, as on an install without the extra.
WITHOUT_EXTRA = "import sys; sys.modules['fastapi'] = None; from pipeline.cli import main; sys.exit(main(sys.argv[1:]))"


def _lessonsync_without_extra(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_simulate_without_the_extra_names_the_install_command(tmp_path: Path) -> None:
    result = _lessonsync_without_extra("simulate", "--port", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "lessonsync simulate needs the platform simulator" in result.stderr
    assert "pip install ./simulator" in result.stderr and "Traceback" not in result.stderr


def test_demo_without_the_extra_stops_before_touching_its_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    data_dir.mkdir()
    (data_dir / "keep.txt").write_text("the demo recreates this folder only when it can run")
    result = _lessonsync_without_extra("demo", "--scale", "tiny", "--data-dir", str(data_dir), cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "needs the platform simulator" in result.stderr and "pip install ./simulator" in result.stderr
    assert (data_dir / "keep.txt").exists()
    assert not (tmp_path / "data").exists()  # no Dagster home created either
