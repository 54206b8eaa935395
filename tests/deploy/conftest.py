"""The wheel-install tests share one wheel per session (deploy/build_wheel.sh) and the dev venv's versions."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheel_helpers import build_wheel, dev_versions


@pytest.fixture(scope="session")
def lessonsync_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def dev_constraints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return dev_versions(tmp_path_factory.mktemp("constraints") / "dev-versions.txt")
