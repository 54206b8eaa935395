"""`lessonsync simulate` and `python -m simulator` (the simulator alone) as a user runs them: a real process,
one startup line, a clean stop."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from simulator import cli


@pytest.mark.slow
@pytest.mark.parametrize("command", [["pipeline.cli", "simulate"], ["simulator"]], ids=["lessonsync", "standalone"])
def test_simulate_serves_and_logs_one_startup_line_without_the_secret(command: list[str]) -> None:
    secret = "cli-test-secret-value"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            *command,
            "--port",
            "0",
            "--scale",
            "tiny",
            "--seed",
            "5",
            "--app-secret",
            secret,
            "--first-page",
            "0",
            "--faults",
            "latency_ms=1",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stderr.readline()  # type: ignore[union-attr]
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        assert "scale tiny" in line and "'active_lessons': " in line and secret not in line
        base_url = match.group(1)
        deadline = time.monotonic() + 30
        while True:
            try:
                token = httpx.post(f"{base_url}/v1/token", json={"appSecret": secret})
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert token.status_code == 200
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
        assert (
            httpx.get(f"{base_url}/v1/active-lessons", params={"pageNumber": "0"}, headers=headers).status_code == 200
        )
    finally:
        process.send_signal(signal.SIGINT)
        remaining = process.communicate(timeout=30)[1]
    assert process.returncode == 0 and secret not in remaining


def test_bad_options_are_refused_with_a_clear_message(capsys) -> None:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--faults", "error_rate=lots"])
    assert "error_rate" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--scale", "huge"])
    args = parser.parse_args([])
    assert (args.scale, args.first_page, args.order, args.port) == ("small", 1, "last_date", 8765)
