"""What the benchmarks share: a free port, the simulator as a subprocess, a child process measured by the
OS (wall time and its own peak RSS via os.wait4), and a CPU meter. One way to do each of these."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_simulator(scale: str, port: int, latency_ms: float | None = None) -> subprocess.Popen[bytes]:
    """`python -m simulator` on loopback, seed 42, optional fixed latency per request; returns once it serves."""
    command = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", str(port),
               "--scale", scale, "--seed", "42"]
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
    peak_rss_mib: float  # the child's own peak resident set, from the kernel
    cpu_seconds: float = 0.0  # the child's own user + system CPU, from the kernel


def run_measured(argv: list[str], env: dict[str, str] | None = None, tail_lines: int = 12) -> ChildRun:
    """Runs `argv` as a child process and waits for it with os.wait4, so the peak RSS is the child's own
    (never the simulator's or this process's)."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        tail = "\n".join(err.read().decode(errors="replace").strip().splitlines()[-tail_lines:])
        return ChildRun(child.returncode, out.read(), tail, round(seconds, 2),
                        round(usage.ru_maxrss / 1024, 1),  # Linux: ru_maxrss in kilobytes
                        round(usage.ru_utime + usage.ru_stime, 2))


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
