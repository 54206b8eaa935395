"""What the benchmarks share: a free port, the simulator as a subprocess, a child process measured by the
OS (wall time and its own peak RSS via os.wait4), a CPU meter, the recorder of a run's GETs and the bare
download of exactly those (the floor or ceiling of that run). One way to do each of these.

`python -m bench.common URLS_FILE --base-url URL [--concurrency N]` is the bare download's child process."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx


def created_directory(text: str) -> Path:
    """A `--work-dir` argument: the directory, created when missing (argparse's `type=`)."""
    path = Path(text)
    path.mkdir(parents=True, exist_ok=True)
    return path


def installed_bytecode(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a measured child that reads its bytecode as an installed deployment does: from the __pycache__
    directories the install (`uv --compile-bytecode`) and `make bytecode` filled, so no measured run compiles a
    module. A private PYTHONPYCACHEPREFIX starts cold: the first run of a sequence would pay for compiling what it
    imports lazily (pyiceberg, the decode worker's modules), and the runs after it would not."""
    child = dict(env)
    child.pop("PYTHONDONTWRITEBYTECODE", None)
    child.pop("PYTHONPYCACHEPREFIX", None)
    return child


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_simulator(scale: str, port: int, latency_ms: float | None = None) -> subprocess.Popen[bytes]:
    """`python -m simulator` on loopback, seed 42, optional fixed latency per request; returns once it serves."""
    command = [
        sys.executable,
        "-m",
        "simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--scale",
        scale,
        "--seed",
        "42",
    ]
    if latency_ms is not None:
        command += ["--faults", f"latency_ms={latency_ms}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        if process.poll() is not None:
            raise SystemExit(f"simulator exited early: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/categories", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.3)


@dataclass
class ChildRun:
    returncode: int
    stdout: bytes
    stderr_tail: str  # the last lines of its stderr, for a failure message
    seconds: float  # wall time of the whole process, imports included
    peak_rss_mib: float  # the child's own peak resident set, from the kernel (PeakRss)
    cpu_seconds: float = 0.0  # the child's own user + system CPU, from the kernel


class PeakRss:
    """A child's own peak resident set: the kernel's VmHWM of its memory, read from /proc every `interval` seconds
    until it exits. Not os.wait4's ru_maxrss: Linux carries the parent's high-water mark into a child over the
    vfork+exec of subprocess (a 1 GiB parent makes /bin/true report 1 GiB), so a benchmark that holds the
    simulator in its own process would report its own size."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.kib = 0
        self._pid = pid
        self._status = Path(f"/proc/{pid}/status")
        self._interval = interval
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while True:
            try:
                lines = self._status.read_text().splitlines()
            except OSError:
                return
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            if fields.get("State", "").strip().startswith("Z") or "VmHWM" not in fields:
                return  # exited (a zombie has no memory left to read)
            self.kib = max(self.kib, int(fields["VmHWM"].split()[0]))
            time.sleep(self._interval)

    def at_exit(self) -> float:
        """Waits until the child has exited, not reaping it (its /proc entry stays readable until the caller waits
        for it): the peak in MiB."""
        os.waitid(os.P_PID, self._pid, os.WEXITED | os.WNOWAIT)
        self._thread.join()
        return round(self.kib / 1024, 1)


def run_measured(argv: list[str], env: dict[str, str] | None = None, tail_lines: int = 12) -> ChildRun:
    """Runs `argv` as a child process and waits for it with os.wait4; its peak RSS is its own (PeakRss), never the
    simulator's or this process's."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        peak_mib = PeakRss(child.pid).at_exit()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        tail = "\n".join(err.read().decode(errors="replace").strip().splitlines()[-tail_lines:])
        return ChildRun(
            child.returncode,
            out.read(),
            tail,
            round(seconds, 2),
            peak_mib,
            round(usage.ru_utime + usage.ru_stime, 2),
        )


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_reported(argv: list[str], env: dict[str, str] | None = None) -> tuple[ChildRun, dict[str, Any]]:
    """run_measured, and what the benchmarks report beside every child: the machine's load average before and
    after it (other work on the machine meanwhile), its peak RSS, wall and CPU seconds."""
    before = load_average()
    child = run_measured(argv, env)
    return child, {
        "load_average_before": before,
        "load_average_after": load_average(),
        "peak_rss_mib": child.peak_rss_mib,
        "process_seconds": child.seconds,
        "cpu_seconds": child.cpu_seconds,
    }


class CpuMeter:
    """CPU seconds spent by this process and by the simulator during one phase: on a shared machine
    these do not depend on how busy the other processes are, unlike wall time."""

    def __init__(self, server_pid: int) -> None:
        import psutil

        self._server = psutil.Process(server_pid)
        self._start = self._read()

    def _read(self) -> tuple[float, float]:
        server = self._server.cpu_times()
        return time.process_time(), server.user + server.system

    def done(self) -> dict[str, float]:
        own, server = self._read()
        return {"cpu_s": round(own - self._start[0], 2), "server_cpu_s": round(server - self._start[1], 2)}


# ---------------------------------------------------------------- a run's requests and their bare download


@contextmanager
def recorded_gets() -> Iterator[list[str]]:
    """Within the block, every successful GET this process makes through PlatformHTTP (LessonSync's transport) is
    appended, in order, as path?query (the host is the same simulator anyway); a non-200 answer (the 400 of the
    first-page probe, a retried 5xx) is not a page the bare download could fetch."""
    from pipeline.source.transport import PlatformHTTP  # here: the simulator's side of bench/ never imports it

    seen: list[str] = []
    original = PlatformHTTP.request

    async def request(
        self: Any, method: str, path: str, params: Mapping[str, str] | None = None, **kwargs: Any
    ) -> httpx.Response:
        response = await original(self, method, path, params, **kwargs)
        if method == "GET" and response.status_code == 200:
            address = urlsplit(self.url(path, params))
            seen.append(address.path + ("?" + address.query if address.query else ""))
        return response

    PlatformHTTP.request = request  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        PlatformHTTP.request = original  # type: ignore[method-assign]


def endpoint_of(url: str) -> str:
    """`/v1/users/u17/lessons/L3/answers?pageSize=100` -> `/v1/users/{user_id}/lessons/{lesson_id}/answers`: the
    stream path template (pipeline/contract/streams.py) the request was made from, so a run's requests can be
    counted by kind; a path no stream declares is given as it is."""
    path = url.split("?", 1)[0]
    return next((template for template, pattern in _templates() if pattern.fullmatch(path)), path)


@cache
def _templates() -> list[tuple[str, re.Pattern[str]]]:
    from pipeline.contract.streams import STREAMS

    templates = {stream.path for stream in STREAMS.values()}
    return [(t, re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(t)))) for t in sorted(templates)]


def requests_by_endpoint(urls: list[str]) -> dict[str, int]:
    return dict(Counter(map(endpoint_of, urls)).most_common())


def bare_download_child(base_url: str, app_secret: str, urls_file: str, concurrency: int) -> dict[str, Any]:
    """In the child: every URL of `urls_file` downloaded, `concurrency` at a time over as many connections,
    all at once (no decoding, no storage, no dependency between requests)."""
    from bench.client_bench import download_all

    urls = Path(urls_file).read_text().splitlines()
    token = httpx.post(f"{base_url}/v1/token", json={"appSecret": app_secret}).json()["access_token"]
    began = time.perf_counter()
    size = asyncio.run(download_all(base_url, token, urls, concurrency)) if urls else 0
    return {"run_seconds": round(time.perf_counter() - began, 2), "requests": len(urls), "bytes": size}


def run_bare_download(base_url: str, urls_file: str, concurrency: int) -> dict[str, Any]:
    """The bare download of `urls_file` in a child process: its seconds, peak RSS and CPU seconds."""
    from pipeline.settings import DEFAULT_APP_SECRET

    argv = [
        sys.executable,
        "-m",
        "bench.common",
        urls_file,
        "--base-url",
        base_url,
        "--concurrency",
        str(concurrency),
        "--app-secret",
        DEFAULT_APP_SECRET,
    ]
    child, sides = run_reported(argv)
    if child.returncode != 0:
        return {"error": child.stderr_tail, **sides}
    return {**json.loads(child.stdout), **sides}


DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def write_doc_section(doc: Path, start: str, end: str, section: str) -> None:
    """Replaces only the generated section between the markers `start` and `end` of `doc` (appended the first
    time); `section` includes the markers."""
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the bare download of a recorded URL list (a child process)")
    parser.add_argument("urls_file")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--app-secret", required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps(bare_download_child(args.base_url, args.app_secret, args.urls_file, args.concurrency)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
