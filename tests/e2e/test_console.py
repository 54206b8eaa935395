"""`lessonsync sync` for real, in a subprocess, read the way its readers read it: a log pipeline parses every line
of LESSONSYNC_LOG_FORMAT=json (no secret in any), an operator reads a stuck run's log (each stream says once what
it waits for; the retries are warnings with their attempt and the budget left), and a person at a terminal sees a
live line per stream (on a pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from stack_helpers import RAW

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.source.stats import StreamProgress, listen_to_progress
from pipeline.stack import local_stack

LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))
SECRET = "app-secret-under-test-4b1e"
PASSWORD = "url-password-under-test-77d0"
pytestmark = pytest.mark.slow


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_") and k != "DAGSTER_HOME"}
    env.update({"LESSONSYNC_DATA_DIR": str(data_dir), "LESSONSYNC_TABLE_FORMAT": "none"})
    env.update({f"LESSONSYNC_{name.upper()}": value for name, value in settings.items()})
    return env


@dataclass
class Synced:
    stdout: str
    stderr: str
    returncode: int
    data_dir: Path
    tokens: list[str]  # every access and refresh token the platform issued to the sync

    @property
    def records(self) -> list[dict[str, Any]]:
        lines = [line for line in (self.stdout + self.stderr).splitlines() if line.strip()]
        parsed = [json.loads(line) for line in lines]  # every line, or the test fails here naming it
        assert all(isinstance(p, dict) and {"time", "level", "logger", "message"} <= p.keys() for p in parsed)
        return parsed

    @property
    def verdict(self) -> dict[str, Any]:
        """The command's last result line (stdout)."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def run_id(self) -> str:
        return re.findall(r"\(run ([0-9a-f-]+)\)", self.stdout)[-1]


@pytest.fixture(scope="module")
def json_sync(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    """A whole sync of a tiny platform (its own app secret) with LESSONSYNC_LOG_FORMAT=json, engine events included."""
    from simulator import SimulatorConfig, start_simulator

    data_dir = tmp_path_factory.mktemp("json_sync") / "data"
    with start_simulator(SimulatorConfig(scale="tiny", app_secret=SECRET)) as sim:
        env = _env(data_dir, base_url=sim.base_url, app_secret=SECRET, log_format="json", log_level="DEBUG")
        done = subprocess.run([LESSONSYNC, "sync"], env=env, capture_output=True, text=True, timeout=600)
        # what the platform handed out: the tokens the sync held (the simulator's own record of them)
        tokens = [*sim.platform.tokens._verified, *sim.platform.tokens._refresh]
    yield Synced(done.stdout, done.stderr, done.returncode, data_dir, tokens)


def test_json_logs_are_one_object_per_line_without_a_secret(json_sync: Synced) -> None:
    assert json_sync.returncode == 0, json_sync.stderr[-3000:]
    records = json_sync.records
    output = json_sync.stdout + json_sync.stderr
    assert json_sync.tokens and not [t for t in json_sync.tokens if t in output]
    assert SECRET not in output and "eyJ" not in output  # a JWT's first characters: no token, whatever its value
    # Dagster's events name their run and step; progress lines carry their figures as fields
    steps = [r for r in records if r.get("dagster_event") == "STEP_SUCCESS"]
    runs = {json_sync.run_id(), json_sync.verdict["models_run_id"]}  # the loads' run, then the models'
    assert steps and all(r["run_id"] in runs and r["step_key"] for r in steps)
    assert {r["run_id"] for r in steps} == runs
    fetched = [r for r in records if r.get("event") == "fetched" and r.get("stream") == "answers"]
    assert fetched and {"pages", "rows", "rate"} <= fetched[0].keys() and fetched[0]["rows"] > 0
    assert json_sync.verdict["outcome"] == "succeeded" and json_sync.verdict["run_id"] == json_sync.run_id()


def test_a_run_carries_a_few_tags_and_no_hook_event(json_sync: Synced) -> None:
    with DagsterInstance.from_config(str(json_sync.data_dir / "dagster_home")) as instance:
        run = instance.get_run_by_id(json_sync.run_id())
        events = {e.dagster_event.event_type_value for e in instance.all_logs(run.run_id) if e.dagster_event}  # type: ignore[union-attr]
    assert run is not None
    own = sorted(key for key in run.tags if key.startswith("lessonsync/"))
    # the writer slot, the window, the process (what recovery reads), the in-process mark (never re-launched)
    assert own == ["lessonsync/in-process", "lessonsync/process", "lessonsync/window", "lessonsync/writes-warehouse"]
    assert run.tags["lessonsync/window"] == "cursor"
    assert "STEP_SUCCESS" in events and not [e for e in events if e.startswith("HOOK_")], sorted(events)


def test_a_stuck_sync_says_once_per_stream_what_it_waits_for_and_warns_each_retry(tmp_path: Path) -> None:
    base_url = f"http://operator:{PASSWORD}@127.0.0.1:{_closed_port()}"  # nothing listens there
    # The budget outlasts the command's start (its fetches, started ahead, wait meanwhile) and a progress period,
    # with room for a start three to four times slower on a loaded machine (CI's two workers beside other tests).
    env = _env(
        tmp_path / "data",
        base_url=base_url,
        app_secret=SECRET,
        log_format="json",
        retry_budget="40",
        retry_max_wait="1",
    )
    done = subprocess.run([LESSONSYNC, "sync"], env=env, capture_output=True, text=True, timeout=600)
    stuck = Synced(done.stdout, done.stderr, done.returncode, tmp_path / "data", [])
    assert stuck.returncode == 1, stuck.stderr[-3000:]
    records, output = stuck.records, done.stdout + done.stderr
    assert SECRET not in output and PASSWORD not in output

    assert not [r for r in records if re.search(r"\b0 pages, 0 rows", r["message"])], "a progress line of no progress"
    waiting = Counter(r["stream"] for r in records if r.get("event") == "waiting")
    assert waiting and max(waiting.values()) == 1, waiting  # once per stream, however long the wait
    said = [r["message"] for r in records if r.get("event") == "waiting"]
    assert all("waiting for the platform token (POST /v1/token retrying: attempt " in m for m in said), said
    assert all("of the retry budget left)" in m for m in said), said

    retries = [r for r in records if r["message"].startswith("retrying POST /v1/token")]
    assert len(retries) >= 2 and {r["level"] for r in retries} == {"WARNING"}
    # One line per retry, not per stream, in the order tried: the fetches' lines held until the run's step takes them
    # over are said before any said after (tests/test_held_logs.py).
    assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
    assert all(0 <= r["budget_left_s"] <= 40 and "retry budget left" in r["message"] for r in retries)

    verdict = stuck.verdict
    assert verdict["outcome"] == "failed" and verdict["error"].startswith("platform unreachable: POST /v1/token at ")
    assert "Error:" not in verdict["message"]  # the description, without the exception's class
    assert "'lms_raw', 'lms_raw'" not in output


def _read_until_exit(process: subprocess.Popen[bytes], master: int, timeout: float) -> bytes:
    """Everything the process writes to its terminal until it exits."""
    out, deadline = bytearray(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the terminal closed with the process
                break
            out += chunk
        elif process.poll() is not None:
            break
    return bytes(out)


def test_on_a_terminal_each_stream_has_a_live_line(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        env = {**_env(tmp_path / "data"), **stack.run_env(), "TERM": "xterm-256color", "COLUMNS": "160"}
        env["LESSONSYNC_TABLE_FORMAT"] = "none"
        master, terminal = pty.openpty()
        process = subprocess.Popen([LESSONSYNC, "sync"], env=env, stdout=terminal, stderr=terminal)
        os.close(terminal)
        try:
            screen = _read_until_exit(process, master, timeout=600).decode("utf-8", "replace")
        finally:
            os.close(master)
            process.wait(timeout=60)
    assert process.returncode == 0, screen[-3000:]
    assert "\x1b[2K" in screen  # the display redraws its lines in place
    lines = [ANSI_AT_START.sub("", line) for line in re.split(r"[\r\n]", screen)]
    drawn = [line for line in lines if line.startswith("groups ")]
    assert any("━" in line and " rows/s" in line and "committed" in line for line in drawn), drawn[-5:]
    # the run's log lines print above it, whole, in the one text layout (a line the display did not clear first
    # would follow a stream's line on the same row)
    logged = [line for line in lines if "[run " in line]
    assert logged and all(TEXT_LINE.match(line) for line in logged), [
        line for line in logged if not TEXT_LINE.match(line)
    ]


def test_the_display_gets_each_streams_figures_from_the_client_and_its_end_from_the_runner(tmp_path: Path) -> None:
    """What a live display is handed during a real sync: pages and rows as they arrive, the answers' planned
    requests and how many are fetched (its bar and ETA), and every stream's end as the runner commits it."""
    seen: list[StreamProgress] = []
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stop_listening = listen_to_progress(seen.append)
        try:
            report = stack.sync(select=RAW)
        finally:
            stop_listening()
    assert report.success, report.error
    ends = {p.stream: p.state for p in seen if p.state in ("committed", "failed", "stopped")}
    assert ends == dict.fromkeys(SYNC_STREAMS, "committed")
    answers = [p for p in seen if p.stream == "answers" and p.state == "fetched"]
    assert len(answers) == 1 and answers[0].rows and answers[0].pages
    assert answers[0].planned and answers[0].done == answers[0].planned  # every planned request, fetched whole
    fetched = {p.stream for p in seen if p.state == "fetched" and p.rows is not None}
    assert fetched == set(SYNC_STREAMS)


ANSI_AT_START = re.compile(r"^(\x1b\[[0-9;?]*[A-Za-z])+")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) +\S+: \[run [0-9a-f]{8}")
