"""Every `lessonsync` example of docs/operations.md ("Running it"), run as written through the installed
console script, against a tiny local platform. Servers get a free port instead of their fixed default, and the
demo runs at scale tiny (its default, small, is what `make demo` shows)."""

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from pipeline.stack import local_stack

REPO = Path(__file__).resolve().parents[2]
LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))
SERVERS = {"receive": "/webhooks/certificates", "simulate": "/_sim/clock"}  # command -> a path that answers


def readme_examples() -> list[str]:
    """The command lines of the ```sh block after 'Cron, without the Dagster daemon.', comments dropped."""
    readme = (REPO / "docs" / "operations.md").read_text()
    block = re.search(r"\*\*Cron, without the Dagster daemon\.\*\*.*?```sh\n(.*?)```", readme, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.startswith("lessonsync ")]


def expand(example: str, tmp: Path) -> list[list[str]]:
    """An example as argument lists: `[--opt VALUE]` gives the line without and with it (VALUE in tmp)."""
    optional = re.search(r"\[(--\S+) (\S+)\]", example)
    if optional is None:
        return [shlex.split(example)]
    without = example.replace(optional.group(0), "")
    with_it = example.replace(optional.group(0), f"{optional.group(1)} {tmp / 'rebuilt.duckdb'}")
    return [shlex.split(without), shlex.split(with_it)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_briefly(args: list[str], env: dict[str, str], cwd: Path) -> None:
    """Start a server example on a free port, wait until it answers, then stop it."""
    port = free_port()
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    else:
        args += ["--port", str(port)]
    server = subprocess.Popen(
        [LESSONSYNC, *args[1:]], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                httpx.get(f"http://127.0.0.1:{port}{SERVERS[args[1]]}", timeout=2)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        pytest.fail(
            f"{shlex.join(args)} never answered: "
            + (server.stdout.read() if server.poll() is not None else "still starting after 120 s")
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_every_cli_example_of_the_readme_runs_as_written(tmp_path):
    examples = readme_examples()
    assert {shlex.split(e)[1] for e in examples} >= {"sync", "rebuild", "receive", "simulate", "demo"}
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        env = {
            **os.environ,
            **stack.run_env(),
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
            "LESSONSYNC_WEBHOOK_BEARER_TOKENS": '["a-receiver-token"]',
        }  # `receive` refuses to run open
        for example in examples:
            for args in expand(example, tmp_path):
                if args[1] in SERVERS:
                    serve_briefly(args, env, tmp_path)
                    continue
                if args[1] == "demo":
                    args += ["--scale", "tiny"]
                done = subprocess.run(
                    [LESSONSYNC, *args[1:]], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
                )
                output = done.stdout + done.stderr
                assert done.returncode == 0, f"{shlex.join(args)} failed:\n{output[-3000:]}"
                assert "Traceback" not in output, f"{shlex.join(args)}:\n{output[-3000:]}"
                if "key:lms/answers" in args:
                    assert "selection widened: lms/answers is fetched together with lms/answer_results" in output
    assert (tmp_path / "rebuilt.duckdb").exists() and "lessonsync sync --select key:lms/answers" in examples
