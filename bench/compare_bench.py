"""Side-by-side benchmark (not a test): LessonSync, the bare-download ceiling and dlt's REST API
source on the same work, the same simulator and the same machine, with every result checked for exactness
against the simulator's ground truth; and LessonSync's full sync across scales. Writes
bench/results/compare_<scale>.json, bench/results/scaling.json, the generated section of docs/BENCHMARKS.md
(between `<!-- compare:start -->` and `<!-- compare:end -->`, nothing else in that file) and
docs/benchmark_scaling.png.

One round, on a simulator started fresh for it (seed 42, 5 ms latency per request), measures in order:
  1. LessonSync full sync of the progress assets (active lessons, answers, answer results) into a fresh
     warehouse, in a child process (`pipeline.sync.run_sync`, real Dagster, checks included); the first
     round records every URL it fetches;
  2. the ceiling: a bare httpx loop with the same concurrency downloading exactly those URLs
     (bench/client_bench.py's ceiling child);
  3. dlt default and dlt tuned, each a full sync into a fresh dataset (bench/dlt_side.py);
  4. LessonSync and dlt tuned again at once (no change), then `POST /_sim/advance?hours=24` (about 1% of
     active lessons change) and both again (1% change).
Each side runs in its own child process: wall time, requests, peak RSS from the OS (os.wait4, the child's
own; with dlt's normalize worker processes, also the peak of the whole process tree, sampled). Results
are checked after the full syncs and after the 1%-change syncs. Rounds repeat (`--repeat`, default 3);
medians are reported and ratios are taken within the same run.

    .venv/bin/python -m bench.compare_bench --scale medium --repeat 3      # the comparison, then scaling
    .venv/bin/python -m bench.compare_bench --only scaling --scaling-scales tiny,small,large
    .venv/bin/python -m bench.compare_bench --only docs                     # re-render from the JSON results
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import DOC, ChildRun, created_directory, free_port, run_measured, start_simulator, write_doc_section
from bench.exactness import Truth

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PLOT = ROOT / "docs" / "benchmark_scaling.png"
START, END = "<!-- compare:start -->", "<!-- compare:end -->"
SCALES = ("tiny", "small", "medium", "large")
SELECT = "group:progress"
LATENCY_MS = 5.0
PAGE_SIZE = 1000
CONCURRENCY = 8
DLT_CONFIGS = ("default", "tuned")
KINDS = ("no_change", "one_percent")


# ---------------------------------------------------------------- children


def lessonsync_child(select: str, urls_file: str | None) -> dict[str, Any]:
    """In the child: one LessonSync sync (bench/sync_bench.py's), recording the URLs fetched if asked: those of
    the two phases the ceiling replays, each line `phase<TAB>path?query` (every round starts its own simulator
    on a new port)."""
    from bench.sync_bench import sync_child

    if not urls_file:
        return sync_child([select])
    every_get = f"{urls_file}.all"
    report = sync_child([select], every_get)
    phased = [
        f"{phase}\t{url}" for url in Path(every_get).read_text().splitlines() if (phase := _phase_of(url)) is not None
    ]
    Path(urls_file).write_text("\n".join(phased))
    return report


def _phase_of(url: str) -> str | None:
    path = url.split("?", 1)[0]
    return "answers" if path.endswith("/answers") else "active_lessons" if path.endswith("/active-lessons") else None


def _tree_sampler(pid_box: list[int], peak: list[float], stop: threading.Event) -> None:
    """Peak RSS of a child and all its descendants together (dlt's normalize workers are processes)."""
    import psutil

    while not stop.wait(0.25):
        if not pid_box:
            continue
        try:
            root = psutil.Process(pid_box[0])
            total = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            peak[0] = max(peak[0], total / 2**20)
        except psutil.Error:
            pass


def measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[ChildRun, float]:
    """run_measured plus the sampled peak RSS of the child's process tree."""
    import psutil

    stop, peak, pid_box = threading.Event(), [0.0], []
    before = {p.pid for p in psutil.Process().children()}

    def find_child() -> None:
        while not stop.is_set() and not pid_box:
            fresh = [p.pid for p in psutil.Process().children() if p.pid not in before]
            if fresh:
                pid_box.append(fresh[0])
            time.sleep(0.05)

    threads = [
        threading.Thread(target=find_child, daemon=True),
        threading.Thread(target=_tree_sampler, args=(pid_box, peak, stop), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        child = run_measured(argv, env)
    finally:
        stop.set()
    return child, round(peak[0], 1)


# ---------------------------------------------------------------- sides


def lessonsync_env(base_url: str, data_dir: Path) -> dict[str, str]:
    dagster_home = data_dir.parent / f"{data_dir.name}_dagster_home"
    dagster_home.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "LESSONSYNC_BASE_URL": base_url,
        "LESSONSYNC_DATA_DIR": str(data_dir),
        "LESSONSYNC_PAGE_SIZE": str(PAGE_SIZE),
        "LESSONSYNC_CONCURRENCY": str(CONCURRENCY),
        "DAGSTER_HOME": str(dagster_home),
    }


def run_lessonsync(base_url: str, data_dir: Path, urls_file: str | None = None) -> dict[str, Any]:
    from bench.sync_bench import summarize

    argv = [sys.executable, "-m", "bench.compare_bench", "--child", "lessonsync"]
    if urls_file:
        argv += ["--urls", urls_file]
    child, tree_peak = measured(argv, lessonsync_env(base_url, data_dir))
    if child.returncode != 0:
        return {"error": child.stderr_tail, "process_seconds": child.seconds, "peak_rss_mib": child.peak_rss_mib}
    report = summarize(json.loads(child.stdout))
    streams = report["streams"]
    return {
        "run_seconds": report["run_seconds"],
        "process_seconds": child.seconds,
        "peak_rss_mib": child.peak_rss_mib,
        "tree_peak_rss_mib": tree_peak,
        "requests": report["requests"],
        "rows": {t: streams.get(t, {}).get("rows_fetched", 0) for t in ("active_lessons", "answers", "answer_results")},
        "stream_seconds": {t: streams.get(t, {}).get("duration_s") for t in ("active_lessons", "answers")},
        "stream_requests": {t: streams.get(t, {}).get("requests") for t in ("active_lessons", "answers")},
        "failed_checks": report["failed_checks"],
        "outside_steps_seconds": report["outside_steps_seconds"],
    }


def run_dlt(base_url: str, config: str, work_dir: Path) -> dict[str, Any]:
    work_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "bench.dlt_side",
        "--base-url",
        base_url,
        "--config",
        config,
        "--work-dir",
        str(work_dir),
    ]
    child, tree_peak = measured(argv)
    if child.returncode != 0:
        return {"error": child.stderr_tail, "process_seconds": child.seconds, "peak_rss_mib": child.peak_rss_mib}
    report = json.loads(child.stdout)
    streams = report["streams"]
    rows = {**streams["active_lessons"]["rows"], **streams["answers"]["rows"]}
    return {
        "run_seconds": report["run_seconds"],
        "process_seconds": child.seconds,
        "peak_rss_mib": child.peak_rss_mib,
        "tree_peak_rss_mib": tree_peak,
        "requests": sum(report["requests"].values()),
        "requests_by_listing": report["requests"],
        "rows": {
            "active_lessons": rows.get("active_lessons", 0),
            "answers": rows.get("answers", 0),
            "answer_results": rows.get("answers__results", 0),
        },
        "stream_seconds": {t: streams[t]["seconds"] for t in ("active_lessons", "answers")},
        "stream_requests": {t: streams[t]["requests"] for t in ("active_lessons", "answers")},
        "step_seconds": {t: streams[t]["step_seconds"] for t in ("active_lessons", "answers")},
    }


def run_ceiling(base_url: str, urls_file: str, server_pid: int) -> dict[str, Any]:
    from bench.client_bench import run_child

    report = run_child(
        [
            "--child",
            "ceiling",
            "--base-url",
            base_url,
            "--concurrency",
            str(CONCURRENCY),
            "--urls",
            urls_file,
            "--server-pid",
            str(server_pid),
        ]
    )
    return {
        "run_seconds": round(sum(report[p]["seconds"] for p in ("active_lessons", "answers")), 2),
        "peak_rss_mib": report["peak_rss_mib"],
        "requests": sum(report[p]["requests"] for p in ("active_lessons", "answers")),
        "stream_seconds": {p: report[p]["seconds"] for p in ("active_lessons", "answers")},
        "stream_requests": {p: report[p]["requests"] for p in ("active_lessons", "answers")},
    }


# ---------------------------------------------------------------- one round


def one_round(
    scale: str,
    number: int,
    work: Path,
    urls_file: str,
    record_urls: bool,
    log: Any,
    dlt_configs: tuple[str, ...] = DLT_CONFIGS,
    incremental: bool = True,
) -> dict[str, Any]:
    port = free_port()
    server = start_simulator(scale, port, LATENCY_MS)
    base_url = f"http://127.0.0.1:{port}"
    round_dir = work / f"round{number}"
    round_dir.mkdir()
    result: dict[str, Any] = {"counts": httpx.get(f"{base_url}/_sim/counts", timeout=60).json(), "runs": {}}
    runs = result["runs"]
    lessonsync_db = round_dir / "lessonsync" / "warehouse.duckdb"

    def side(name: str, measure: Any, checker: Any = None, database: Path | None = None, flavour: str = "") -> None:
        """One measured side; a failure is recorded and the round goes on with the other sides."""
        log(f"round {number}: {name}")
        try:
            runs[name] = measure()
        except BaseException as exc:  # noqa: BLE001 - a benchmark failure is a finding, not a crash
            runs[name] = {"error": f"{type(exc).__name__}: {exc}", "process_seconds": 0, "peak_rss_mib": 0}
        if checker is not None and "error" not in runs[name]:
            try:
                runs[name]["exactness"] = checker.check(database, flavour)
            except Exception as exc:  # noqa: BLE001
                runs[name]["exactness"] = {"equal": False, "error": f"{type(exc).__name__}: {exc}", "tables": {}}

    try:
        log(f"round {number}: ground truth (full)")
        truth = Truth(round_dir, base_url, "full")
        side(
            "lessonsync_full",
            lambda: run_lessonsync(base_url, round_dir / "lessonsync", urls_file if record_urls else None),
            truth,
            lessonsync_db,
            "lessonsync",
        )
        if Path(urls_file).exists() and Path(urls_file).stat().st_size:
            side("ceiling", lambda: run_ceiling(base_url, urls_file, server.pid))
        for config in dlt_configs:
            side(
                f"dlt_{config}_full",
                lambda config=config: run_dlt(base_url, config, round_dir / f"dlt_{config}"),
                truth,
                round_dir / f"dlt_{config}" / "dlt.duckdb",
                "dlt",
            )
        truth.close()
        if incremental:
            last = dlt_configs[-1]
            side("lessonsync_no_change", lambda: run_lessonsync(base_url, round_dir / "lessonsync"))
            side(f"dlt_{last}_no_change", lambda: run_dlt(base_url, last, round_dir / f"dlt_{last}"))
            result["advance"] = httpx.post(f"{base_url}/_sim/advance", params={"hours": 24}, timeout=600).json()
            truth = Truth(round_dir, base_url, "after_advance")
            side(
                "lessonsync_one_percent",
                lambda: run_lessonsync(base_url, round_dir / "lessonsync"),
                truth,
                lessonsync_db,
                "lessonsync",
            )
            side(
                f"dlt_{last}_one_percent",
                lambda: run_dlt(base_url, last, round_dir / f"dlt_{last}"),
                truth,
                round_dir / f"dlt_{last}" / "dlt.duckdb",
                "dlt",
            )
            truth.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    for name, run in runs.items():
        exact = run.get("exactness", {}).get("equal")
        log(
            f"round {number}: {name}: "
            + (
                f"FAILED {run['error'].splitlines()[-1:]}"
                if "error" in run
                else f"{run['run_seconds']} s, {run.get('requests')} requests, peak {run['peak_rss_mib']} MiB"
                + ("" if exact is None else f", exact={exact}")
            )
        )
    return result


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median run time (its own figures, so they stay consistent), plus every time."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {**runs[0], "all_seconds": []}
    ordered = sorted(ok, key=lambda r: r["run_seconds"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    median["all_seconds"] = [r["run_seconds"] for r in ordered]
    median["peak_rss_mib_max"] = max(r["peak_rss_mib"] for r in ok)
    median["exact_every_round"] = all(r.get("exactness", {}).get("equal", True) for r in ok)
    median["failed_rounds"] = len(runs) - len(ok)
    return median


def compare(
    scale: str,
    repeat: int,
    work_dir: Path | None,
    dlt_configs: tuple[str, ...] = DLT_CONFIGS,
    incremental: bool = True,
    keep_work: Path | None = None,
) -> dict[str, Any]:
    """The side-by-side rounds and their medians; data goes to a temp dir (or `keep_work`, left in place)."""
    log_lines: list[str] = []

    def log(line: str) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", file=sys.stderr, flush=True)
        log_lines.append(line)

    result: dict[str, Any] = {
        "scale": scale,
        "repeat": repeat,
        "machine": machine(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "latency_ms": LATENCY_MS,
        "page_size": PAGE_SIZE,
        "concurrency": CONCURRENCY,
        "select": SELECT,
        "rounds": [],
    }
    out = RESULTS / f"compare_{scale}.json"
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="compare_bench_", dir=work_dir) as temporary:
        work = Path(temporary) if keep_work is None else keep_work
        work.mkdir(parents=True, exist_ok=True)
        urls = str(work / "lessonsync.urls")
        for number in range(repeat):  # interleaved: a busy machine weighs on every side alike
            result["rounds"].append(one_round(scale, number, work, urls, number == 0, log, dlt_configs, incremental))
            out.write_text(json.dumps(result, indent=2, default=str))  # an interrupted run keeps its rounds
    names = result["rounds"][0]["runs"].keys()
    result["median"] = {
        name: _median([r["runs"][name] for r in result["rounds"] if name in r["runs"]]) for name in names
    }
    result["ratios"] = ratios(result["median"])
    result["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    result["load_average_end"] = os.getloadavg()
    out.write_text(json.dumps(result, indent=2, default=str))
    return result


def ratios(median: dict[str, Any]) -> dict[str, Any]:
    """LessonSync against the ceiling and against dlt, from medians of the same run."""
    mine = median["lessonsync_full"]
    found: dict[str, Any] = {}
    if "error" in mine:
        return found
    ceiling = median.get("ceiling", {})
    if "error" not in ceiling:
        found["lessonsync_share_of_ceiling_end_to_end"] = round(ceiling["run_seconds"] / mine["run_seconds"], 3)
        found["lessonsync_share_of_ceiling_answers"] = round(
            ceiling["stream_seconds"]["answers"] / mine["stream_seconds"]["answers"], 3
        )
    for config in DLT_CONFIGS:
        theirs = median.get(f"dlt_{config}_full", {})
        if "error" in theirs or not theirs:
            continue
        # answer rows per second of each side's answers stream, and end to end (both streams, same rows)
        mine_rate = mine["rows"]["answers"] / mine["stream_seconds"]["answers"]
        their_rate = theirs["rows"]["answers"] / theirs["stream_seconds"]["answers"]
        found[f"lessonsync_over_dlt_{config}_answers_rows_per_s"] = round(mine_rate / their_rate, 2)
        found[f"lessonsync_over_dlt_{config}_end_to_end"] = round(theirs["run_seconds"] / mine["run_seconds"], 2)
    return found


# ---------------------------------------------------------------- scaling


def scaling(scales: list[str], work_dir: Path | None, reuse: dict[str, Any] | None) -> dict[str, Any]:
    """LessonSync's same full sync at each scale (one run each, fresh simulator and warehouse). A scale the
    comparison just measured reuses its median full sync."""
    out = RESULTS / "scaling.json"
    previous = json.loads(out.read_text()) if out.exists() else {"scales": {}}
    result = {
        "machine": machine(),
        "latency_ms": LATENCY_MS,
        "page_size": PAGE_SIZE,
        "concurrency": CONCURRENCY,
        "select": SELECT,
        "scales": previous.get("scales", {}),
    }
    for scale in scales:
        if reuse and reuse.get("scale") == scale and "error" not in reuse["median"]["lessonsync_full"]:
            run = dict(reuse["median"]["lessonsync_full"])
            run["source"] = f"compare_{scale}.json (median of {reuse['repeat']})"
            run["counts"] = reuse["rounds"][0]["counts"]
        else:
            port = free_port()
            print(f"[scaling] {scale}: starting the simulator", file=sys.stderr, flush=True)
            server = start_simulator(scale, port, LATENCY_MS)
            base_url = f"http://127.0.0.1:{port}"
            try:
                counts = httpx.get(f"{base_url}/_sim/counts", timeout=60).json()
                with tempfile.TemporaryDirectory(prefix="scaling_", dir=work_dir) as work:
                    run = run_lessonsync(base_url, Path(work) / "lessonsync")
            finally:
                server.terminate()
                server.wait(timeout=60)
            run["source"] = "scaling run"
            run["counts"] = counts
        run["date"] = datetime.now(UTC).date().isoformat()
        run["complete"] = (
            "error" not in run
            and run["rows"]["active_lessons"] == run["counts"]["active_lessons"]
            and run["rows"]["answers"] == run["counts"]["answers"]
        )
        result["scales"][scale] = run
        print(
            f"[scaling] {scale}: "
            + (
                run.get("error", "")[-300:]
                if "error" in run
                else f"{run['run_seconds']} s, peak {run['peak_rss_mib']} MiB"
            ),
            file=sys.stderr,
            flush=True,
        )
        RESULTS.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str))
    return result


# ---------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    """Without importing the packages: this process stays small (see Truth)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:  # the bench extra is missing
            return None

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            host.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(memory, 1),
        "os": host.platform(),
        "python": host.python_version(),
        **{name: installed(name) for name in ("dagster", "duckdb", "dlt", "httpx")},
        "load_average": os.getloadavg(),
    }


def _n(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _mib(value: float) -> str:
    return f"{value / 1024:.2f} GiB" if value >= 1024 else f"{value:,.0f} MiB"


def _exact(run: dict[str, Any]) -> str:
    check = run.get("exactness")
    if not check:
        return "not checked"
    if check["equal"]:
        tables = check["tables"]
        return (
            "**equal** ("
            + ", ".join(f"{_n(tables[t]['rows'])}" for t in ("active_lessons", "answers", "answer_results"))
            + ")"
        )
    parts = []
    for table, c in check["tables"].items():
        if not c["equal"]:
            bits = [f"{_n(c['rows'])} of {_n(c['expected_rows'])} rows"]
            bits += [f"{_n(c[k])} {k}" for k in ("missing", "unexpected", "different") if c[k]]
            if c["rows"] != c["distinct_keys"]:
                bits.append(f"{_n(c['rows'] - c['distinct_keys'])} duplicate keys")
            parts.append(f"{table}: " + ", ".join(bits))
    return "**NOT equal**: " + "; ".join(parts)


SIDES = {
    "ceiling": "ceiling (bare httpx, LessonSync's URLs)",
    "lessonsync": "**LessonSync**",
    "dlt_default": "dlt rest_api, defaults",
    "dlt_tuned": "dlt rest_api, tuned",
}


def _seconds(run: dict[str, Any] | None) -> str:
    if run is None:
        return "–"
    return "FAILED" if "error" in run else f"{run['run_seconds']:,.1f}"


def compare_markdown(results: list[dict[str, Any]]) -> list[str]:
    """One row per scale and side: the full sync, then the no-change and 1%-change syncs beside it."""
    lines = [
        "| scale | side | full s | answer rows/s | requests | peak RSS (process / tree) | exact (full) | "
        "no change s | 1% change s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        m, scale = result["median"], result["scale"]
        for side, label in SIDES.items():
            run = m.get(side if side == "ceiling" else f"{side}_full")
            if run is None:
                continue
            if "error" in run:
                error = run["error"].splitlines()[-1][:160] if run["error"] else ""
                lines.append(f"| {scale} | {label} | FAILED | | | {_mib(run['peak_rss_mib'])} | {error} | | |")
                continue
            answers_s = run.get("stream_seconds", {}).get("answers")
            rows = run.get("rows") or m["lessonsync_full"].get("rows", {})
            rate = rows.get("answers", 0) / answers_s if answers_s and rows.get("answers") else None
            tree = run.get("tree_peak_rss_mib")
            peak = _mib(run["peak_rss_mib"]) + (f" / {_mib(tree)}" if tree else "")
            exact = "downloads only" if side == "ceiling" else _exact(run)
            later = ["–", "–"] if side == "ceiling" else [_seconds(m.get(f"{side}_{k}")) for k in KINDS]
            lines.append(
                f"| {scale} | {label} | {run['run_seconds']:,.1f} | {_n(round(rate)) if rate else '–'} | "
                f"{_n(run.get('requests'))} | {peak} | {exact} | {' | '.join(later)} |"
            )
    lines.append("")
    for result in results:
        r, counts = result.get("ratios", {}), result["rounds"][0]["counts"]
        rounds = f"median of {result['repeat']} rounds" if result["repeat"] > 1 else "one round"
        parts = []
        if "lessonsync_share_of_ceiling_answers" in r:
            parts.append(f"**{r['lessonsync_share_of_ceiling_answers']:.0%}** of the ceiling's speed")
        parts += [
            f"**{r[key]:.2f}×** dlt {config}'s"
            for config in DLT_CONFIGS
            if (key := f"lessonsync_over_dlt_{config}_answers_rows_per_s") in r
        ]
        lines.append(
            f"- {result['scale']} ({_n(counts['answers'])} answers; {result['started'][:10]}, {rounds}): "
            f"LessonSync's answer rows/s are {', '.join(parts) or 'not compared'}."
        )
    return lines


def scaling_markdown(result: dict[str, Any]) -> list[str]:
    lines = [
        "### Scaling: LessonSync's full sync of the progress assets at every scale",
        "",
        "| scale | active lessons | answers | answer results | wall s | rows/s (all three tables) | "
        "µs per answer | peak RSS | from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for scale in SCALES:
        run = result["scales"].get(scale)
        if run is None:
            continue
        if "error" in run:
            lines.append(f"| {scale} | | | | FAILED | | | {_mib(run['peak_rss_mib'])} | {run['date']} |")
            continue
        rows = run["rows"]
        total = sum(rows.values())
        lines.append(
            f"| {scale} | {_n(rows['active_lessons'])} | {_n(rows['answers'])} | "
            f"{_n(rows['answer_results'])} | {run['run_seconds']:,.1f} | {_n(round(total / run['run_seconds']))} | "
            f"{run['run_seconds'] / max(rows['answers'], 1) * 1e6:,.0f} | {_mib(run['peak_rss_mib'])} | "
            f"{run['source']}, {run['date']} |"
        )
    lines += [
        "",
        "Each row is one full sync of the code on disk when it ran (`from` says which run): compare µs per "
        "answer between rows of one run; rows of different runs may have run different code.",
        "",
        f"![throughput and peak RSS against scale]({PLOT.relative_to(DOC.parent)})",
    ]
    return lines


WHY_DLT_MISSES = [
    "- Why dlt misses answers (nothing here is worked around; bench/dlt_side.py): the API returns bare arrays, "
    "so dlt's page-number paginator stops at the first empty page, and an answer listing pages on active-lesson "
    "records, so a page can be empty while later ones are not; without `parallelized` (dlt's default) the "
    "dependent resource also carries its incremental value from one lesson to the next (dlt-hub/dlt#2429).",
    "- Tuned dlt is exact here only because a page of 1,000 active lessons covers each lesson's whole answer "
    "listing at these scales; dlt cannot plan answer requests from the active lessons that changed, so its "
    "incremental runs list every lesson's answers.",
]


def render_section(compare_results: list[dict[str, Any]], scaling_result: dict[str, Any] | None) -> str:
    any_result = (compare_results or [scaling_result])[0] or {}
    mach = any_result.get("machine", machine())
    lines = [
        START,
        "",
        "## Beside dlt and the ceiling: `python -m bench.compare_bench`",
        "",
        "_Generated by `bench/compare_bench.py` from `bench/results/compare_<scale>.json` and "
        "`bench/results/scaling.json`; regenerating replaces only this section. The method and dlt's two "
        "configurations: the docstrings of `bench/compare_bench.py` and `bench/dlt_side.py`._",
        "",
        f"Machine: {mach['cpus']} cores ({mach['cpu_model']}), {mach['memory_gib']} GiB RAM; Python "
        f"{mach['python']}, Dagster {mach['dagster']}, DuckDB {mach['duckdb']}, dlt {mach['dlt']}, httpx "
        f"{mach['httpx']}; load average at the start {', '.join(f'{x:.1f}' for x in mach['load_average'])}. "
        f"The progress assets (`--select {SELECT}`), {LATENCY_MS:g} ms a request, page size {PAGE_SIZE}, "
        f"concurrency {CONCURRENCY}; answer rows/s = answers loaded / the answers step's seconds.",
        "",
    ]
    if compare_results:
        lines += compare_markdown(compare_results) + [""]
    if scaling_result and scaling_result.get("scales"):
        lines += scaling_markdown(scaling_result) + [""]
    if compare_results:
        lines += WHY_DLT_MISSES + [""]
    lines.append(END)
    return "\n".join(lines)


def plot(scaling_result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [
        (s, scaling_result["scales"][s])
        for s in SCALES
        if s in scaling_result["scales"] and "error" not in scaling_result["scales"][s]
    ]
    if not runs:
        return
    answers = [r["rows"]["answers"] for _, r in runs]
    seconds = [r["run_seconds"] for _, r in runs]
    rate = [sum(r["rows"].values()) / r["run_seconds"] for _, r in runs]
    rss = [r["peak_rss_mib"] for _, r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    labels = [f"{s}\n{a:,}" for (s, _), a in zip(runs, answers, strict=True)]
    ax = axes[0]
    ax.plot(answers, seconds, "o-", color="tab:blue")
    if len(runs) > 1:
        per_answer = seconds[-1] / answers[-1]
        ax.plot(answers, [a * per_answer for a in answers], "--", color="grey", label="linear (through the largest)")
        ax.legend(fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("Full sync wall time")
    ax.set_xlabel("answers (log)")
    ax.set_ylabel("seconds (log)")
    ax = axes[1]
    ax.plot(answers, rate, "o-", color="tab:green")
    ax.set_xscale("log")
    ax.set_ylim(0, max(rate) * 1.2)
    ax.set_title("Throughput")
    ax.set_xlabel("answers (log)")
    ax.set_ylabel("rows/s (active lessons + answers + results)")
    ax = axes[2]
    ax.plot(answers, rss, "o-", color="tab:red")
    ax.set_xscale("log")
    ax.set_ylim(0, max(rss) * 1.2)
    ax.set_title("Peak RSS of the sync process")
    ax.set_xlabel("answers (log)")
    ax.set_ylabel("MiB")
    for ax in axes:
        ax.set_xticks(answers, labels, fontsize=7)
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    fig.suptitle(
        "LessonSync full sync of the progress assets by simulator scale "
        f"({LATENCY_MS:g} ms latency, page size {PAGE_SIZE}, concurrency {CONCURRENCY})",
        fontsize=10,
    )
    fig.tight_layout()
    PLOT.parent.mkdir(exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def regenerate(scales_compared: list[str] | None = None) -> None:
    """docs section and plot from whatever results exist (the comparison at every scale it was run at)."""
    compare_results = []
    for scale in scales_compared or SCALES:
        path = RESULTS / f"compare_{scale}.json"
        if path.exists():
            result = json.loads(path.read_text())
            if "median" in result:
                compare_results.append(result)
    scaling_path = RESULTS / "scaling.json"
    scaling_result = json.loads(scaling_path.read_text()) if scaling_path.exists() else None
    if scaling_result:
        plot(scaling_result)
    if compare_results or scaling_result:
        write_doc_section(DOC, START, END, render_section(compare_results, scaling_result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=SCALES, help="scale of the side-by-side comparison")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the comparison (medians reported)")
    parser.add_argument(
        "--scaling-scales",
        default=",".join(SCALES),
        help="scales of the scaling runs (comma-separated; the compared scale reuses its median)",
    )
    parser.add_argument("--only", choices=("compare", "scaling", "docs"), help="one part only")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/ (tests)")
    parser.add_argument(
        "--work-dir", type=created_directory, help="temporary data goes under here (default: the temp dir)"
    )
    parser.add_argument("--results-dir", type=Path, help="JSON results go here (default bench/results)")
    parser.add_argument(
        "--dlt-configs",
        help="dlt configurations to run (default: default,tuned at tiny and small; "
        "tuned only at medium and large: dlt's defaults peaked at 6.9 GiB RSS at small)",
    )
    parser.add_argument("--full-only", action="store_true", help="skip the no-change and 1%%-change runs")
    parser.add_argument(
        "--reuse-compare",
        default="",
        help="scales whose saved comparison (compare_<scale>.json) "
        "gives the scaling figure instead of a new run (with --only scaling)",
    )
    parser.add_argument("--child", choices=("lessonsync",), help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "lessonsync":
        print(json.dumps(lessonsync_child(SELECT, args.urls), default=str))
        return 0
    if args.results_dir:
        global RESULTS
        RESULTS = args.results_dir
    compared = None
    failed = False
    if args.only in (None, "compare"):
        chosen = args.dlt_configs or (",".join(DLT_CONFIGS) if args.scale in ("tiny", "small") else "tuned")
        configs = tuple(c for c in chosen.split(",") if c)
        compared = compare(args.scale, args.repeat, args.work_dir, configs, not args.full_only)
        for _name, run in compared["median"].items():
            failed |= "error" in run
        print(
            json.dumps(
                {
                    "median_seconds": {k: v.get("run_seconds") for k, v in compared["median"].items()},
                    "ratios": compared["ratios"],
                },
                indent=2,
            )
        )
    if args.only in (None, "scaling"):
        scales = [s for s in args.scaling_scales.split(",") if s]
        result = scaling(scales, args.work_dir, compared)
        for scale in (s for s in args.reuse_compare.split(",") if s):  # a comparison run earlier, from its JSON
            result = scaling([scale], args.work_dir, json.loads((RESULTS / f"compare_{scale}.json").read_text()))
        failed |= any("error" in result["scales"][s] for s in scales)
    if not args.no_docs:
        regenerate()
        print(f"wrote {DOC.relative_to(ROOT)} (generated section) and {PLOT.relative_to(ROOT)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
