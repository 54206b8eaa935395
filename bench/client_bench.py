"""Benchmark of the source client (not a test): records/s and requests/s for active lessons and answers
(full sync), next to a bare httpx loop with the same concurrency downloading the same pages (the
ceiling), and the client's peak RSS.

The simulator runs in a subprocess (`python -m simulator`, fixed seed, latency_ms per request); each
measured side runs in its own child process so peak RSS is the child's own (os.wait4). `--repeat`
rounds of: a client run (the first one records every URL it fetches), then the ceiling on exactly those
URLs; medians are reported. The one-time pandas import pyarrow does on its first Python
conversion (seconds on a small machine) happens before the clock starts.

    .venv/bin/python -m bench.client_bench --scale large       # also: small, medium
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import CpuMeter, free_port, run_measured, start_simulator
from simulator.config import DEFAULT_APP_SECRET

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("active_lessons", "answers")


def run_child(args: list[str]) -> dict[str, Any]:
    """Runs this module as a child with `args`; its JSON report plus its own peak RSS."""
    child = run_measured([sys.executable, "-m", "bench.client_bench", *args])
    if child.returncode != 0:
        raise SystemExit(f"child {args[:2]} failed with exit code {child.returncode}: {child.stderr_tail}")
    report = json.loads(child.stdout)
    report["peak_rss_mib"] = child.peak_rss_mib
    return report


def client_child(
    base_url: str, page_size: int, concurrency: int, urls_file: str | None, server_pid: int
) -> dict[str, Any]:
    import pyarrow as pa

    from pipeline.settings import Settings
    from pipeline.source.client import PlatformClient

    pa.array([1.0])  # pyarrow imports pandas on its first conversion: not part of the measurement
    settings = Settings(base_url=base_url, page_size=page_size, concurrency=concurrency, data_dir="unused")
    seen: list[tuple[str, str]] = []
    phase = {"name": PHASES[0]}
    report: dict[str, Any] = {}
    with PlatformClient(settings) as client:
        client.first_page()
        if urls_file:

            async def record(request: httpx.Request) -> None:
                if request.method == "GET":
                    seen.append((phase["name"], str(request.url)))

            client._ready().transport._client.event_hooks["request"] = [record]  # bench-only introspection
        began, rows, pairs, cpu = time.perf_counter(), 0, [], CpuMeter(server_pid)
        for batch in client.iter_stream("active_lessons"):
            rows += batch.records.num_rows
            pairs.append(batch.records.select(["user_id", "lesson_id"]))
        report["active_lessons"] = {**_phase(client.last_run_stats(), rows, time.perf_counter() - began), **cpu.done()}
        phase["name"] = "answers"
        changed = pa.Table.from_batches(pairs)
        began, rows, results, cpu = time.perf_counter(), 0, 0, CpuMeter(server_pid)
        for batch in client.iter_answers(changed):
            rows += batch.records.num_rows if batch.table.name == "answers" else 0
            results += batch.records.num_rows if batch.table.name == "answer_results" else 0
        report["answers"] = {
            **_phase(client.last_run_stats(), rows, time.perf_counter() - began),
            "answer_results": results,
            **cpu.done(),
        }
    if urls_file:
        Path(urls_file).write_text("\n".join(f"{p}\t{u}" for p, u in seen))
    return report


def _phase(stats: Any, rows: int, seconds: float) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 2),
        "records": rows,
        "requests": stats.requests,
        "retries": stats.retries,
        "pages": stats.pages,
        "complete": stats.complete,
        "records_per_s": round(rows / seconds),
        "requests_per_s": round(stats.requests / seconds, 1),
    }


async def download_all(base_url: str, token: str, urls: list[str], concurrency: int) -> int:
    """The ceiling: every URL downloaded, `concurrency` at a time over as many connections; returns the bytes."""
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base_url, limits=limits, timeout=120, headers={"Authorization": f"Bearer {token}"}
    ) as http:

        async def one(url: str) -> int:
            async with slots:
                response = await http.get(url)
                body = await response.aread()
                if response.status_code != 200:
                    raise SystemExit(f"ceiling: {url} answered {response.status_code}")
                return len(body)

        return sum(await asyncio.gather(*(one(u) for u in urls)))


def ceiling_child(base_url: str, concurrency: int, urls_file: str, server_pid: int) -> dict[str, Any]:
    lines = [line.split("\t", 1) for line in Path(urls_file).read_text().splitlines()]
    token = httpx.post(f"{base_url}/v1/token", json={"appSecret": DEFAULT_APP_SECRET}).json()["access_token"]
    report = {}
    for phase in PHASES:
        urls = [url for p, url in lines if p == phase]
        began, cpu = time.perf_counter(), CpuMeter(server_pid)
        asyncio.run(download_all(base_url, token, urls, concurrency))
        seconds = time.perf_counter() - began
        report[phase] = {
            "seconds": round(seconds, 2),
            "requests": len(urls),
            "requests_per_s": round(len(urls) / seconds, 1),
            **cpu.done(),
        }
    return report


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase, the run with the median time; peak RSS is the highest seen."""
    merged: dict[str, Any] = {"peak_rss_mib": max(r["peak_rss_mib"] for r in runs), "runs": len(runs)}
    for phase in PHASES:
        ordered = sorted((r[phase] for r in runs), key=lambda p: p["seconds"])
        merged[phase] = {**ordered[len(ordered) // 2], "all_seconds": [p["seconds"] for p in ordered]}
    return merged


def compare(scale: str, latency_ms: float, page_size: int, concurrency: int, repeat: int) -> dict[str, Any]:
    port = free_port()
    server = start_simulator(scale, port, latency_ms)
    base_url = f"http://127.0.0.1:{port}"
    common = [
        "--base-url",
        base_url,
        "--page-size",
        str(page_size),
        "--concurrency",
        str(concurrency),
        "--server-pid",
        str(server.pid),
    ]
    ceilings, clients = [], []
    try:
        with tempfile.NamedTemporaryFile(suffix=".urls") as urls:
            for round_number in range(repeat):  # interleaved, so a busy machine weighs on both sides alike
                record = ["--urls", urls.name] if round_number == 0 else []
                clients.append(run_child(["--child", "client", *common, *record]))
                ceilings.append(run_child(["--child", "ceiling", *common, "--urls", urls.name]))
    finally:
        server.terminate()
        server.wait(timeout=30)
    ceiling, client = _median_run(ceilings), _median_run(clients)
    for phase in PHASES:
        mine, bare = client[phase], ceiling[phase]
        bare["records_per_s"] = round(mine["records"] / bare["seconds"])
        mine["share_of_ceiling"] = round(bare["seconds"] / mine["seconds"], 3)
        # On an idle machine with one core for the server and one for the downloader, each side's wall
        # time is bounded below by the busier of the two processes: a load-independent estimate.
        mine["cpu_us_per_record"] = round(mine["cpu_s"] / mine["records"] * 1e6, 1)
        bare["cpu_us_per_record"] = round(bare["cpu_s"] / mine["records"] * 1e6, 1)
        mine["server_cpu_us_per_record"] = round(mine["server_cpu_s"] / mine["records"] * 1e6, 1)
        mine["share_of_ceiling_by_cpu"] = round(
            max(bare["cpu_s"], bare["server_cpu_s"]) / max(mine["cpu_s"], mine["server_cpu_s"]), 3
        )
    return {
        "scale": scale,
        "latency_ms": latency_ms,
        "page_size": page_size,
        "concurrency": concurrency,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d"),
        "client": client,
        "ceiling": ceiling,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="large", choices=("tiny", "small", "medium", "large"))
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--page-size", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="measured runs of each side (medians reported)")
    parser.add_argument("--child", choices=("client", "ceiling"), help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "client":
        print(json.dumps(client_child(args.base_url, args.page_size, args.concurrency, args.urls, args.server_pid)))
        return 0
    if args.child == "ceiling":
        print(json.dumps(ceiling_child(args.base_url, args.concurrency, args.urls, args.server_pid)))
        return 0
    result = compare(args.scale, args.latency_ms, args.page_size, args.concurrency, args.repeat)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"client_{args.scale}.json").write_text(json.dumps(result, indent=2))
    for phase in PHASES:
        c, k = result["client"][phase], result["ceiling"][phase]
        print(
            f"{args.scale:6} {phase:15} client {c['records_per_s']:>9,} rec/s {c['requests_per_s']:>7} req/s "
            f"| ceiling {k['records_per_s']:>9,} rec/s {k['requests_per_s']:>7} req/s "
            f"| {c['share_of_ceiling']:.0%} of ceiling (by CPU: {c['share_of_ceiling_by_cpu']:.0%}; client "
            f"{c['cpu_us_per_record']} us/record, bare loop {k['cpu_us_per_record']}, "
            f"simulator {c['server_cpu_us_per_record']})"
        )
    peaks = result["client"]["peak_rss_mib"], result["ceiling"]["peak_rss_mib"]
    print(f"client peak RSS {peaks[0]} MiB (ceiling loop {peaks[1]} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
