"""Settings are validated before any work: a wrong value fails `lessonsync sync` at once (no retrying of a bad
address, no run started) and the code location's load (`dagster definitions validate`, `make dev`, the daemon's
run workers), with one line naming each setting and its problem, never a secret's value."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.settings import SettingsError, load_settings

BIN = Path(sys.executable).parent
SECRET = "s3cr3t-value-never-shown"

BAD = {
    "LESSONSYNC_BASE_URL": [
        ("not a url", "contains spaces"),
        ("ftp://platform.example", "scheme 'ftp'"),
        ("platform.example:8765", "http:// or https://"),
        ("http://", "no host name"),
        ("http://platform.example/?a=1", "query"),
    ],
    "LESSONSYNC_DUCKDB_MEMORY_LIMIT": [("lots", "not a DuckDB memory size"), ("100", "not a DuckDB memory size")],
    "LESSONSYNC_NIGHTLY_CRON": [("every night", "not a cron expression"), ("0 2 * *", "5 fields")],
    "LESSONSYNC_ANALYTICS_AS_OF": [("2026-13-01T00:00:00Z", "ISO 8601"), ("2026-01-31T00:00:00", "no UTC offset")],
    "LESSONSYNC_DATA_DIR": [("/proc/lessonsync", "cannot create files")],
    "LESSONSYNC_RETRY_BUDGET": [("-5", "greater than 0")],
}
CASES = [(name, value, problem) for name, values in BAD.items() for value, problem in values]


def _clean_env(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_")}
    return {**env, "LESSONSYNC_DATA_DIR": str(tmp_path / "data"), "LESSONSYNC_APP_SECRET": SECRET, **values}


@pytest.mark.parametrize(("name", "value", "problem"), CASES)
def test_a_wrong_setting_is_named_with_its_problem(
    name: str, value: str, problem: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as failure:
        load_settings()
    message = str(failure.value)
    assert "\n" not in message and f"{name}: " in message and problem in message, message


def test_secrets_are_never_shown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LESSONSYNC_BASE_URL", f"ftp://user:{SECRET}@platform.example")
    monkeypatch.setenv("LESSONSYNC_ALERT_WEBHOOK_URL", SECRET)
    monkeypatch.setenv("LESSONSYNC_PAGE_SIZE", "0")
    with pytest.raises(SettingsError) as failure:
        load_settings()
    assert SECRET not in str(failure.value) and "LESSONSYNC_PAGE_SIZE" in str(failure.value)


def test_sync_fails_at_once_on_a_bad_address(tmp_path: Path) -> None:
    started = time.monotonic()
    env = _clean_env(tmp_path, LESSONSYNC_BASE_URL="not a url", LESSONSYNC_RETRY_BUDGET="300")
    done = subprocess.run([BIN / "lessonsync", "sync"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and time.monotonic() - started < 30  # not 300 s of retrying
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("lessonsync sync: invalid settings: LESSONSYNC_BASE_URL: ")
    assert not (tmp_path / "data").exists()  # no work started


def test_the_code_location_fails_to_load_naming_the_setting(tmp_path: Path) -> None:
    env = _clean_env(tmp_path, LESSONSYNC_DUCKDB_MEMORY_LIMIT="lots")
    done = subprocess.run(
        [BIN / "dagster", "definitions", "validate", "-m", "pipeline.definitions"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "SettingsError: invalid settings: LESSONSYNC_DUCKDB_MEMORY_LIMIT: 'lots' is not a DuckDB memory size" in (
        output
    ), output[-3000:]
    assert SECRET not in output
