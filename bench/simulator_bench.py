"""Benchmark of the platform simulator (not a test): serving throughput and memory at a scale.

Starts `python -m simulator` in a SUBPROCESS on loopback, then sweeps with pageSize 1000 and a few
concurrent clients: /v1/active-lessons (pages/s, records/s), then /v1/lessons/{id}/answers with
includeArchived and includeEntryQuiz for every lesson (answer rows/s). Peak RSS of the server is sampled
with psutil. Aims: >= 100,000 answer rows/s on one core; peak RSS < 1.5 GiB at scale large.

    .venv/bin/python bench/simulator_bench.py --scale large
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx
import orjson
import psutil

from simulator.config import DEFAULT_APP_SECRET

RESULTS = Path(__file__).resolve().parent / "results"


class PeakRss:
    """Samples a process's resident memory every 0.1 s and keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(0.1)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(scale: str, seed: int, port: int) -> tuple[subprocess.Popen[bytes], float]:
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
        str(seed),
    ]
    began = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/_sim/clock"
    while True:
        if process.poll() is not None:
            raise SystemExit(f"simulator exited early: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return process, time.perf_counter() - began
        except httpx.HTTPError:
            time.sleep(0.2)


class Sweeper:
    """`concurrency` threads, each with its own keep-alive http.client connection: the stdlib reads a
    Content-Length body in C with the GIL released, so the client stays light and the server is measured."""

    def __init__(self, port: int, token: str, concurrency: int) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}"}
        self.concurrency = concurrency
        self._local = threading.local()

    def get(self, path: str, params: dict[str, str]) -> bytes:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        connection.request("GET", f"{path}?{urlencode(params)}", headers=self.headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise SystemExit(f"GET {path} answered {response.status}: {body[:300]!r}")
        return body

    def sweep(
        self, jobs: list[tuple[str, dict[str, str]]], deadline: float, until_empty: bool, marker: bytes
    ) -> tuple[int, int]:
        """Fetch every job (path, params); with until_empty, page each path until an empty page.

        Rows are counted by a member every record carries, not decoded: this measures the server, and a
        client decoding 10 million rows on the same 2-core machine would measure itself."""

        def run(job: tuple[str, dict[str, str]]) -> tuple[int, int]:
            path, params = job
            requests = rows = 0
            page = int(params["pageNumber"])
            while time.perf_counter() < deadline:
                found = self.get(path, {**params, "pageNumber": str(page)}).count(marker)
                requests, rows = requests + 1, rows + found
                if not until_empty or found == 0:
                    break
                page += 1
            return requests, rows

        with ThreadPoolExecutor(self.concurrency) as pool:
            results = list(pool.map(run, jobs))
        return sum(r for r, _ in results), sum(n for _, n in results)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(
    port: int, server: psutil.Process, page_size: int, concurrency: int, max_seconds: float
) -> dict[str, object]:
    token = httpx.post(f"http://127.0.0.1:{port}/v1/token", json={"appSecret": DEFAULT_APP_SECRET}).json()[
        "access_token"
    ]
    sweeper = Sweeper(port, token, concurrency)
    counts = httpx.get(f"http://127.0.0.1:{port}/_sim/counts").json()
    size = str(page_size)
    pages = -(-counts["active_lessons"] // page_size)
    jobs = [("/v1/active-lessons", {"pageSize": size, "pageNumber": str(n + 1)}) for n in range(pages)]
    began, cpu = time.perf_counter(), cpu_seconds(server)
    requests, rows = sweeper.sweep(jobs, began + max_seconds, until_empty=False, marker=b'"_ownerId"')
    al_seconds, al_cpu = time.perf_counter() - began, cpu_seconds(server) - cpu
    lesson_ids: list[str] = []
    for n in range(1, 10_000):
        batch = orjson.loads(sweeper.get("/v1/lessons", {"pageSize": "1000", "pageNumber": str(n)}))
        lesson_ids += [lesson["id"] for lesson in batch]
        if len(batch) < 1000:
            break
    flags = {"pageSize": size, "pageNumber": "1", "includeArchived": "true", "includeEntryQuiz": "true"}
    jobs = [(f"/v1/lessons/{quote(lesson_id, safe='')}/answers", flags) for lesson_id in lesson_ids]
    began, cpu = time.perf_counter(), cpu_seconds(server)
    answer_requests, answer_rows = sweeper.sweep(
        jobs, began + max_seconds, until_empty=True, marker=b'"_activeLessonId"'
    )
    answer_seconds, answer_cpu = time.perf_counter() - began, cpu_seconds(server) - cpu
    return {
        "counts": counts,
        "active_lessons": {
            "requests": requests,
            "records": rows,
            "seconds": round(al_seconds, 2),
            "pages_per_s": round(requests / al_seconds, 1),
            "records_per_s": round(rows / al_seconds),
            "server_cpu_seconds": round(al_cpu, 2),
            "records_per_server_cpu_s": round(rows / al_cpu),
        },
        "answers": {
            "requests": answer_requests,
            "rows": answer_rows,
            "seconds": round(answer_seconds, 2),
            "rows_per_s": round(answer_rows / answer_seconds),
            "coverage": round(answer_rows / counts["answers"], 4),
            "server_cpu_seconds": round(answer_cpu, 2),
            "rows_per_server_cpu_s": round(answer_rows / answer_cpu),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=("tiny", "small", "medium", "large"))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-seconds", type=float, default=180, help="cap on each sweep")
    args = parser.parse_args()
    port = free_port()
    process, startup = start_server(args.scale, args.seed, port)
    rss = PeakRss(process.pid)
    try:
        result = measure(port, rss.process, args.page_size, args.concurrency, args.max_seconds)
    finally:
        peak = rss.stop()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    result.update(
        {
            "scale": args.scale,
            "seed": args.seed,
            "page_size": args.page_size,
            "concurrency": args.concurrency,
            "startup_seconds": round(startup, 2),
            "server_peak_rss_mib": round(peak / 2**20, 1),
            "cpu_count": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d"),
        }
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"simulator_{args.scale}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
