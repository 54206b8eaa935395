"""Latency-bound benchmark (not a test): LessonSync's full sync next to the ceiling, a bare httpx
download of exactly the same pages, against one simulator whose every request takes `--latency-ms` (40 ms by
default, like a real network), in ONE run. Writes bench/results/latency_<scale>.json and the generated section
of docs/BENCHMARKS.md between `<!-- latency:start -->` and `<!-- latency:end -->` (nothing else in that file).

One simulator (seed 42) is started once; then `--repeat` rounds (default 3), each of, in order:
  1. LessonSync's full sync into a fresh data dir, in a child process (`pipeline.sync.run_sync` on an ephemeral
     Dagster instance, as `lessonsync sync` runs it: every asset by default, checks and marts included, or
     `--select`), recording every GET it makes (path and query: pages, probe, drift checks);
  2. the ceiling: a bare httpx loop in a child process that downloads exactly those URLs (recorded in the
     first round) with LESSONSYNC_CONCURRENCY connections and as many requests in flight, all at once: no
     decoding, no storage, no dependency between requests.
Wall time: LessonSync's `run_sync` call (process imports excluded, the run's own start-up included) and the
ceiling's download; peak RSS of each child from the OS (os.wait4). Medians are reported; the ratio is taken
within the same run. The machine's load average is recorded before and after each side: on a shared machine
seconds are only indicative.

    .venv/bin/python -m bench.latency_bench                       # scale medium, 40 ms, page size 100
    .venv/bin/python -m bench.latency_bench --scale small --repeat 1 --select 'key:lms/*'
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    DOC,
    CpuMeter,
    created_directory,
    free_port,
    installed_bytecode,
    load_average,
    run_bare_download,
    run_reported,
    start_simulator,
    write_doc_section,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
START, END = "<!-- latency:start -->", "<!-- latency:end -->"
TARGET_RATIO = 1.25  # the aim: LessonSync's full sync within 1.25 x the ceiling


# ---------------------------------------------------------------- children


def lessonsync_child(select: list[str], urls_file: str) -> dict[str, Any]:
    """In the child: one sync (bench/sync_bench.py's), every successful GET recorded as path?query."""
    from bench.sync_bench import sync_child

    report = sync_child(select, urls_file)
    # plain values only: the marts' materializations carry table schemas, which JSON cannot take
    report["materializations"] = {
        key: {name: value for name, value in metadata.items() if isinstance(value, (int, float, str, bool, type(None)))}
        for key, metadata in report["materializations"].items()
    }
    return report


# ---------------------------------------------------------------- sides


def run_lessonsync(
    base_url: str, data_dir: Path, select: list[str], urls_file: str, page_size: int, concurrency: int
) -> dict[str, Any]:
    from bench.sync_bench import summarize

    home = data_dir.parent / f"{data_dir.name}_dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "LESSONSYNC_BASE_URL": base_url,
        "LESSONSYNC_DATA_DIR": str(data_dir),
        "LESSONSYNC_PAGE_SIZE": str(page_size),
        "LESSONSYNC_CONCURRENCY": str(concurrency),
        "DAGSTER_HOME": str(home),
    }
    env = installed_bytecode(env)
    argv = [
        sys.executable,
        "-m",
        "bench.latency_bench",
        "--child",
        "lessonsync",
        "--urls",
        urls_file,
        *[f"--select={s}" for s in select],
    ]
    child, sides = run_reported(argv, env)
    if child.returncode != 0:
        return {"error": child.stderr_tail, **sides}
    raw = json.loads(child.stdout)
    recorded = raw.pop("requests_recorded")
    report = summarize(raw)
    return {
        "run_seconds": report["run_seconds"],
        "requests": report["requests"],
        "requests_recorded": recorded,
        "rows_fetched": report["rows_fetched"],
        "steps": report["steps"],
        "failed_checks": report["failed_checks"],
        # per stream: its fetch-and-commit seconds and the commit's share (duration_s, commit_s)
        "streams": report["streams"],
        **sides,
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sorted((r for r in runs if "error" not in r), key=lambda r: r["run_seconds"])
    if not ok:
        return runs[0]
    return {
        **ok[(len(ok) - 1) // 2],
        "all_seconds": [r["run_seconds"] for r in ok],
        "peak_rss_mib_max": max(r["peak_rss_mib"] for r in ok),
    }


def measure(
    scale: str,
    latency_ms: float,
    page_size: int,
    concurrency: int,
    select: list[str],
    repeat: int,
    work_dir: Path | None,
) -> dict[str, Any]:
    def log(line: str) -> None:
        print(f"[{datetime.now(UTC):%H:%M:%S}] {line}", file=sys.stderr, flush=True)

    port = free_port()
    server = start_simulator(scale, port, latency_ms)
    base_url = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {
        "scale": scale,
        "latency_ms": latency_ms,
        "page_size": page_size,
        "concurrency": concurrency,
        "select": select or ["everything (as `lessonsync sync`)"],
        "cpus": os.cpu_count(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_at_start": load_average(),
        "counts": httpx.get(f"{base_url}/_sim/counts", timeout=60).json(),
        "rounds": [],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"latency_{scale}.json"
    try:
        with tempfile.TemporaryDirectory(prefix="latency_bench_", dir=work_dir) as temporary:
            work = Path(temporary)
            urls = str(work / "lessonsync.urls")
            for number in range(repeat):  # interleaved: a busy machine weighs on both sides alike
                log(f"round {number + 1}: LessonSync full sync")
                served = CpuMeter(server.pid)
                mine = run_lessonsync(
                    base_url,
                    work / f"round{number}",
                    select,
                    urls if number == 0 else str(work / "unused.urls"),
                    page_size,
                    concurrency,
                )
                mine["simulator_cpu_seconds"] = served.done()["server_cpu_s"]
                log(
                    f"round {number + 1}: "
                    + (
                        f"FAILED {mine['error'][-300:]}"
                        if "error" in mine
                        else f"{mine['run_seconds']} s, {mine['requests']} requests, peak {mine['peak_rss_mib']} MiB"
                    )
                )
                log(f"round {number + 1}: ceiling")
                served = CpuMeter(server.pid)
                bare = run_bare_download(base_url, urls, concurrency) if Path(urls).exists() else {"error": "no URLs"}
                bare["simulator_cpu_seconds"] = served.done()["server_cpu_s"]
                log(
                    f"round {number + 1}: "
                    + (
                        f"FAILED {bare['error'][-300:]}"
                        if "error" in bare
                        else f"{bare['run_seconds']} s, {bare['requests']} requests, peak {bare['peak_rss_mib']} MiB"
                    )
                )
                result["rounds"].append({"lessonsync": mine, "ceiling": bare})
                out.write_text(json.dumps(result, indent=2))  # an interrupted run keeps its rounds
    finally:
        server.terminate()
        server.wait(timeout=60)
    result["median"] = {side: _median([r[side] for r in result["rounds"]]) for side in ("lessonsync", "ceiling")}
    mine, bare = result["median"]["lessonsync"], result["median"]["ceiling"]
    if "error" not in mine and "error" not in bare:
        result["ratio"] = round(mine["run_seconds"] / bare["run_seconds"], 3)
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["load_average_at_end"] = load_average()
    out.write_text(json.dumps(result, indent=2))
    return result


# ---------------------------------------------------------------- docs


def render_section(result: dict[str, Any]) -> str:
    mine, bare = result["median"]["lessonsync"], result["median"]["ceiling"]
    ratio = result.get("ratio")
    verdict = (
        "-"
        if ratio is None
        else (
            f"**{ratio:.2f}×** the ceiling (target ≤ {TARGET_RATIO}×: "
            + ("met" if ratio <= TARGET_RATIO else "missed")
            + ")"
        )
    )
    counts = result["counts"]
    lines = [
        START,
        "",
        "## Latency-bound full sync: `python -m bench.latency_bench`",
        "",
        "_Generated by `bench/latency_bench.py` from `bench/results/latency_<scale>.json`; regenerating "
        "replaces only this section._ "
        f"Scale {result['scale']} ({', '.join(f'{v:,} {k}' for k, v in counts.items() if isinstance(v, int))}), "
        f"every request delayed {result['latency_ms']:g} ms by the simulator, page size {result['page_size']}, "
        f"{result['concurrency']} requests in flight; {len(result['rounds'])} round(s), medians; "
        f"{result['cpus']} cores, load average {result['load_average_at_start']} at the start and "
        f"{result['load_average_at_end']} at the end ({result['started']}). Selection: "
        f"{', '.join(result['select'])}.",
        "",
        "| side | wall s | requests | CPU s (its process) | simulator CPU s | peak RSS MiB | load average before → after |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, side in (
        ("LessonSync full sync (`run_sync`)", mine),
        ("ceiling: bare httpx download of the same pages", bare),
    ):
        if "error" in side:
            lines.append(f"| {name} | FAILED | | | | {side.get('peak_rss_mib', '')} | |")
            continue
        lines.append(
            f"| {name} | {side['run_seconds']} (all: {side['all_seconds']}) | {side['requests']:,} | "
            f"{side.get('cpu_seconds', '-')} | {side.get('simulator_cpu_seconds', '-')} | "
            f"{side['peak_rss_mib']} | {side['load_average_before']} → {side['load_average_after']} |"
        )
    lines += ["", f"LessonSync / ceiling: {verdict}."]
    # The 1-minute averages: the 5- and 15-minute ones still remember what ran before the benchmark.
    busiest = max(result["load_average_at_start"][0], result["load_average_at_end"][0])
    if busiest > result["cpus"]:
        lines += [
            "",
            f"**Taken on a shared, overloaded machine** (1-minute load average up to {busiest:g} on {result['cpus']} "
            "cores): both sides were CPU-starved, so these seconds and their ratio are not benchmark "
            "results; rerun `python -m bench.latency_bench` on a quiet machine. Requests and peak RSS hold.",
        ]
    if "steps" in mine:
        slowest = sorted(mine["steps"].items(), key=lambda kv: -kv[1])[:6]
        lines += [
            "",
            "Slowest steps of the median LessonSync run (seconds, Dagster event log; steps run one "
            "after another, the fetches of the streams overlap them): "
            + ", ".join(f"`{k}` {v}" for k, v in slowest)
            + ".",
        ]
    lines += ["", END]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=("tiny", "small", "medium", "large"))
    parser.add_argument("--latency-ms", type=float, default=40.0)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--select", action="append", default=[], help="asset selection (default: everything)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians reported)")
    parser.add_argument(
        "--work-dir", type=created_directory, help="temporary data goes under here (default: the temp dir)"
    )
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/BENCHMARKS.md")
    parser.add_argument("--child", choices=("lessonsync",), help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "lessonsync":
        print(json.dumps(lessonsync_child(args.select, args.urls), default=str))
        return 0
    result = measure(
        args.scale, args.latency_ms, args.page_size, args.concurrency, args.select, args.repeat, args.work_dir
    )
    print(
        json.dumps(
            {
                "median_seconds": {k: v.get("run_seconds") for k, v in result["median"].items()},
                "peak_rss_mib": {k: v.get("peak_rss_mib") for k, v in result["median"].items()},
                "ratio": result.get("ratio"),
            },
            indent=2,
        )
    )
    if not args.no_docs:
        write_doc_section(DOC, START, END, render_section(result))
    return 0 if "ratio" in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
