"""Benchmark of the whole sync (not a test): against ONE simulator started once (and warmed by a full sync
that is not measured; `--no-warm-up` skips it), a full sync into a fresh data dir, then at once a no-change
incremental sync (three rounds: the median one is reported), then after `POST /_sim/advance?hours=24` (~1% of
active lessons change) a 1%-change incremental sync. Per run: wall
time, rows and rows/s per stream, requests, peak RSS of the sync process (the kernel's) and of its whole process
tree (sampled: the answers' decode workers are processes of their own), and the Dagster run's time
outside the assets (run start/stop overhead, from the event log's step timings), its CPU seconds, and its
floor: every GET the run made is recorded (bench/common.py recorded_gets) and, right after it,
downloaded again by the bare httpx loop with the sync's concurrency (bench/common.py run_bare_download), so
each run kind reports its requests (by endpoint), the bare download's seconds, LessonSync's seconds and the
overhead above that floor.

Each sync runs in its own child process (`pipeline.sync.run_sync` on an ephemeral instance; `--dagster-storage
sqlite`: on the persistent instance of a DAGSTER_HOME of its own, whose SQLite storage the runs' events are written
to as those of `lessonsync sync` and the daemon's runs are), so the peak RSS is the sync's own (os.wait4), never the
simulator's. Results go to bench/results/sync_<scale>.json (`_sqlite` added for that storage) after every run,
so an interrupted benchmark keeps what it measured; at the end, the generated section of docs/BENCHMARKS.md for
that scale (between `<!-- sync-<scale>:start -->` and its end marker), on an ephemeral instance only (`--no-docs`
leaves the file alone).

    .venv/bin/python -m bench.sync_bench --scale large                     # raw tables + certificates
    .venv/bin/python -m bench.sync_bench --scale small --select group:progress --select 'key:lms/*'
    .venv/bin/python -m bench.sync_bench --scale medium --latency-ms 40 --page-size 100  # as over a network
    .venv/bin/python -m bench.sync_bench --scale large --mirror-off-too    # the defaults beside TABLE_FORMAT=none

`--mirror-off-too` runs each run kind twice, at the defaults and with `LESSONSYNC_TABLE_FORMAT=none` (each on a
data dir of its own, one right after the other, against the same simulator state), and prints the goals' ratios
taken in that one run: full at the defaults over full with the mirror off, each run kind over its floor, and the
peaks. A run's time includes every step of it: `lms_raw`, its checks and the mirror step `lake/iceberg_tables`
(the selection of raw tables brings it along, as `lessonsync sync` does).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.common import (
    DOC,
    created_directory,
    free_port,
    installed_bytecode,
    recorded_gets,
    requests_by_endpoint,
    run_bare_download,
    run_reported,
    start_simulator,
    write_doc_section,
)
from bench.rss_timeline import TIMELINE_ENV
from bench.rss_timeline import summarize as rss_summary

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from pipeline.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results"
STREAMS = ("active_lessons", "answers", "answer_results")
RUN_KINDS = ("full", "no_change", "one_percent")
STORAGE_ENV = "BENCH_DAGSTER_STORAGE"  # the children's Dagster instance: "ephemeral" (default) or "sqlite"
NO_CHANGE_ROUNDS = 3  # no-change syncs in a row (bench_selection), each beside its floor; the median one is reported


def sync_child(select: list[str], urls_file: str | None = None, full_refresh: bool = False) -> dict[str, Any]:
    """Runs in the child: one sync (`full_refresh`: the full refresh job), its materialization metadata and the run's
    step timings; with `urls_file`, every successful GET of the run written there (one path?query a line) and counted
    by endpoint."""
    from pipeline.memory import pause_collections

    pause_collections()  # the process set up as `lessonsync sync` sets up its own (pipeline/memory.py)
    from dagster import DagsterEventType

    from bench.rss_timeline import step_marks, timeline_from_env
    from pipeline.settings import load_settings
    from pipeline.sync import run_sync

    # The definitions' modules (~1 s; run_sync imports them on first use) are imported before the clock starts,
    # as a run worker has them loaded before its run begins: run_seconds is the run's own time, building the
    # definitions included.
    importlib.import_module("pipeline.defs.code_location")
    settings = load_settings()
    instance = _instance(settings)
    with recorded_gets() as urls, timeline_from_env() as timeline:
        began, cpu_began = time.perf_counter(), time.process_time()
        report = run_sync(settings, select=select, instance=instance, full_refresh=full_refresh)
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
        if timeline is not None:  # bench/rss_timeline.py asked for the run's memory over time
            timeline.close(step_marks(instance, report.run_id))
    recorded: dict[str, Any] = {}
    if urls_file is not None:
        Path(urls_file).write_text("\n".join(urls))
        recorded = {"requests_recorded": len(urls), "requests_by_endpoint": requests_by_endpoint(urls)}
    if not report.success:
        raise SystemExit(f"sync failed: {report.error}")
    stamps: dict[str, list[float]] = {}
    step_seconds = 0.0
    steps: dict[str, float] = {}  # seconds per step (asset or check): where a run's time goes
    # the nightly sync is two runs, the loads and then the models (pipeline/sync.py): both runs' steps count
    run_ids = [report.run_id, *([report.models_run_id] if report.models_run_id else [])]
    for record in (record for run_id in run_ids for record in instance.all_logs(run_id)):
        event = record.dagster_event
        if event is None:
            continue
        stamps.setdefault(event.event_type_value, []).append(record.timestamp)
        if event.event_type == DagsterEventType.STEP_SUCCESS:
            step_seconds += event.event_specific_data.duration_ms / 1000
            steps[event.step_key] = round(event.event_specific_data.duration_ms / 1000, 2)
    run_start, run_end = stamps["PIPELINE_START"][0], stamps["PIPELINE_SUCCESS"][-1]
    return {
        "run_seconds": round(seconds, 2),
        "run_cpu_seconds": round(cpu_seconds, 2),  # every thread's, in run_sync
        "dagster_run_seconds": round(run_end - run_start, 2),  # the first run's start to the last one's end
        "run_ids": run_ids,
        "step_seconds": round(step_seconds, 2),
        "steps": steps,
        "failed_checks": report.failed_checks,
        "materializations": report.materializations,
        **recorded,
    }


def _instance(settings: Settings) -> DagsterInstance:
    """The child's Dagster instance (STORAGE_ENV), made before the clock starts as a run worker has its own."""
    from dagster import DagsterInstance

    from pipeline.instance import ensure_dagster_home

    if os.environ.get(STORAGE_ENV, "ephemeral") == "ephemeral":
        return DagsterInstance.ephemeral()
    ensure_dagster_home(settings)  # the DAGSTER_HOME of _sync_env, with LessonSync's dagster.yaml
    return DagsterInstance.get()


def run_sync_child(
    select: list[str], env: dict[str, str], urls_file: str, full_refresh: bool = False
) -> dict[str, Any]:
    """One sync in a child process, its GETs recorded in `urls_file`; its report plus wall time, the child's
    own peak RSS and CPU seconds (user + system: unlike wall time, barely moved by other work on the machine)."""
    args = [sys.executable, "-m", "bench.sync_bench", "--child", "--urls", urls_file]
    args += [f"--select={s}" for s in select] + (["--full-refresh"] if full_refresh else [])
    # The child samples its memory (bench/rss_timeline.py): the kernel's peak is one process's, and the answers'
    # decode workers are processes of their own, so the peak a machine must hold is the whole tree's.
    timeline_file = Path(env.get(TIMELINE_ENV) or f"{urls_file}.rss.json")
    # process_seconds and cpu_seconds include the imports and building the definitions
    child, sides = run_reported(args, {**env, TIMELINE_ENV: str(timeline_file)})
    if child.returncode != 0:  # a failed sync is a finding: keep its time and memory
        return {"error": child.stderr_tail, **sides}
    memory = rss_summary(json.loads(timeline_file.read_text()))
    tree = {
        "peak_tree_rss_mib": max(memory["sampled_peak"]["tree"], sides["peak_rss_mib"]),
        "peak_tree_pss_mib": memory["peak_tree_pss_mib"],
        "peak_tree_during": memory["open_at_peak"],
    }
    return summarize({**json.loads(child.stdout), **sides, **tree})


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Per stream: rows fetched, rows/s, requests; the run's total requests are counted once per stream."""
    streams: dict[str, Any] = {}
    requests_by_load: dict[tuple[str, str], int] = {}  # tables of one load share its request count
    for key, meta in report.pop("materializations").items():
        if key == "lake/iceberg_tables":  # the mirror step, and what the raw step's background mirror did before it
            report["mirror"] = {name: value for name, value in meta.items() if name != "repaired"}
            continue
        table = key.split("/")[-1]
        fetched = meta.get("rows_fetched", meta.get("events_loaded"))
        streams[table] = {
            name: meta.get(name)
            for name in (
                "rows_fetched",
                "rows_per_second",
                "rows_inserted",
                "rows_updated",
                "rows_deleted",
                "requests",
                "retries",
                "duration_s",
                "commit_s",
            )
            if meta.get(name) is not None
        }
        if fetched is not None:
            streams[table]["rows_fetched"] = fetched
        if meta.get("requests") is not None:
            requests_by_load[(str(meta.get("cursor_after")), str(meta.get("duration_s")))] = meta["requests"]
    report["streams"] = streams
    report["requests"] = sum(requests_by_load.values())
    report["rows_fetched"] = sum(stream.get("rows_fetched", 0) for stream in streams.values())
    report["outside_steps_seconds"] = round(report["dagster_run_seconds"] - report["step_seconds"], 2)
    return report


MIRROR_OFF = "mirror_off"  # the variant with LESSONSYNC_TABLE_FORMAT=none (--mirror-off-too)


def bench_selection(
    select: list[str],
    base_url: str,
    work_dir: Path,
    label: str,
    save: Any,
    mirror_off_too: bool = False,
    no_change_rounds: int = NO_CHANGE_ROUNDS,
) -> dict[str, Any]:
    """The three run kinds of `select`, one after another on one data dir, each followed by its floor: the
    bare download of exactly the GETs it made (bench/common.py), so what the API's shape imposes on a run
    (its requests, downloaded with nothing else to do) and what LessonSync adds above it are told apart. With
    `mirror_off_too`, each run kind also runs right after with LESSONSYNC_TABLE_FORMAT=none on a data dir of its
    own (same simulator state, same load on the machine), kept under runs["variants"]["mirror_off"], and the
    goals' ratios under runs["ratios"]. The no-change run, a few seconds beside a floor of one or two, is run
    `no_change_rounds` times (each of them beside its own floor; all under runs["no_change_rounds"]), and the round
    with the median ratio to its floor stands for it: one round alone is too noisy on a shared machine."""
    from pipeline.settings import load_settings

    concurrency = load_settings().concurrency  # the sync's own limit of requests in flight
    variants = {"": {}, **({MIRROR_OFF: {"LESSONSYNC_TABLE_FORMAT": "none"}} if mirror_off_too else {})}
    envs = {
        name: _sync_env(base_url, work_dir, label + (f"_{name}" if name else ""), extra)
        for name, extra in variants.items()
    }
    runs: dict[str, Any] = {"select": select}
    if mirror_off_too:
        runs["variants"] = {MIRROR_OFF: {}}
    for kind in RUN_KINDS:
        if kind == "one_percent":
            activity = httpx.post(f"{base_url}/_sim/advance", params={"hours": 24}, timeout=600).json()
            runs["advance_activity"] = activity.get("activity")
        rounds = no_change_rounds if kind == "no_change" else 1
        for _ in range(rounds):
            for variant, env in envs.items():
                into = runs["variants"][variant] if variant else runs
                name = f"{label}{f' ({variant})' if variant else ''}"
                run = _run_with_floor(
                    select, env, work_dir / f"{label}_{variant}_{kind}.urls", base_url, concurrency, name, kind
                )
                if rounds == 1 or "error" in run:
                    into[kind] = run
                else:
                    into.setdefault(f"{kind}_rounds", []).append(run)
                    into[kind] = _median_round(into[f"{kind}_rounds"])
                save(label, runs)
                if "error" in run:
                    return runs
    for into in [runs, *runs.get("variants", {}).values()]:
        full = into["full"]["run_seconds"]
        for kind in RUN_KINDS[1:]:
            into[kind]["share_of_full"] = round(into[kind]["run_seconds"] / full, 4)
            if "error" not in into[kind]["floor"]:
                into[kind]["floor_share_of_full"] = round(into[kind]["floor"]["run_seconds"] / full, 4)
    if mirror_off_too:
        runs["ratios"] = goal_ratios(runs)
    save(label, runs)
    return runs


def _sync_env(base_url: str, work_dir: Path, label: str, extra: dict[str, str]) -> dict[str, str]:
    env = installed_bytecode(
        {
            **os.environ,
            "LESSONSYNC_BASE_URL": base_url,
            "LESSONSYNC_DATA_DIR": str(work_dir / label),
            "DAGSTER_HOME": str(work_dir / f"{label}_dagster_home"),
            **extra,
        }
    )
    Path(env["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    return env


def warm_up_simulator(select: str, base_url: str, work_dir: Path) -> float:
    """A full sync of `select` that is not measured, into a data dir of its own, with the mirror off (it changes
    nothing on the platform): the measured runs then meet a simulator and OS caches as warm as their floors,
    each downloaded right after its run, find them. Without it the first run of a sequence starts cold, and a
    comparison of the defaults (run first) with the mirror off (run second) charges the defaults with that."""
    print("warm-up full sync (not measured) ...", file=sys.stderr, flush=True)
    env = _sync_env(base_url, work_dir, "warm_up", {"LESSONSYNC_TABLE_FORMAT": "none"})
    run = run_sync_child([select], env, str(work_dir / "warm_up.urls"))
    if "error" in run:
        raise SystemExit(f"the warm-up sync failed: {run['error']}")
    for leftover in (env["LESSONSYNC_DATA_DIR"], env["DAGSTER_HOME"]):  # off the disk the measured runs write to
        shutil.rmtree(leftover, ignore_errors=True)
    return float(run["process_seconds"])


def _run_with_floor(
    select: list[str], env: dict[str, str], urls_file: Path, base_url: str, concurrency: int, label: str, kind: str
) -> dict[str, Any]:
    """One sync of `kind` in a child process, then its floor (the bare download of its GETs)."""
    print(f"[{label}] {kind} sync ...", file=sys.stderr, flush=True)
    run = run_sync_child(select, env, str(urls_file))
    if "error" in run:
        print(f"[{label}] {kind} FAILED: {run['error']}", file=sys.stderr, flush=True)
        return run
    print(
        f"[{label}] {kind}: {run['process_seconds']} s, peak {run['peak_rss_mib']} MiB, steps {run['steps']}, "
        f"load average {run['load_average_after']}; its floor ...",
        file=sys.stderr,
        flush=True,
    )
    # The simulator's state is what the sync saw (GETs change nothing): the same URLs, the same pages.
    run["floor"] = floor = run_bare_download(base_url, str(urls_file), concurrency)
    if "error" not in floor:
        run["overhead_over_floor_s"] = round(run["run_seconds"] - floor["run_seconds"], 2)
    print(
        f"[{label}] {kind} floor: {floor.get('run_seconds', 'FAILED')} s for {floor.get('requests')} requests",
        file=sys.stderr,
        flush=True,
    )
    return run


def _over_floor(run: dict[str, Any]) -> float | None:
    """The run's seconds over its floor's; None without a floor (its download failed)."""
    floor = run.get("floor", {}).get("run_seconds")
    return run["run_seconds"] / floor if floor else None


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio to its own floor is the median of `rounds` (the lower one of an even count); a round
    without a floor ranks last."""
    ranked = sorted(rounds, key=lambda run: _over_floor(run) or float("inf"))
    return ranked[(len(ranked) - 1) // 2]


def goal_ratios(runs: dict[str, Any]) -> dict[str, Any]:
    """The goals' figures from one invocation: full at the defaults over full with the mirror off, each run kind
    over its floor (both variants), and each run's peak RSS (the process's; the process tree's)."""
    off = runs["variants"][MIRROR_OFF]

    def over_floor(run: dict[str, Any]) -> float | None:
        ratio = _over_floor(run)
        return round(ratio, 2) if ratio is not None else None

    return {
        "full_over_mirror_off": round(runs["full"]["run_seconds"] / off["full"]["run_seconds"], 3),
        # CPU seconds of the whole sync process: on a loaded machine, unlike wall time, barely moved by other work
        "cpu_over_mirror_off": {
            kind: round(runs[kind]["cpu_seconds"] / off[kind]["cpu_seconds"], 3) for kind in RUN_KINDS
        },
        "over_floor": {kind: over_floor(runs[kind]) for kind in RUN_KINDS},
        "over_floor_mirror_off": {kind: over_floor(off[kind]) for kind in RUN_KINDS},
        "peak_rss_mib": {kind: [runs[kind]["peak_rss_mib"], runs[kind].get("peak_tree_rss_mib")] for kind in RUN_KINDS},
        "peak_rss_mib_mirror_off": {
            kind: [off[kind]["peak_rss_mib"], off[kind].get("peak_tree_rss_mib")] for kind in RUN_KINDS
        },
        "mirror_step_seconds": {kind: runs[kind]["steps"].get("lake__iceberg_tables") for kind in RUN_KINDS},
        "raw_step_seconds": {
            kind: [runs[kind]["steps"].get("lms_raw"), off[kind]["steps"].get("lms_raw")] for kind in RUN_KINDS
        },
    }


def ratios_markdown(results: dict[str, Any]) -> str:
    """The goals' ratios of every selection run with --mirror-off-too, one line each."""
    lines = []
    for label, runs in results["selections"].items():
        ratios = runs.get("ratios")
        if ratios is None:
            continue
        floors = ratios["over_floor"]
        lines.append(
            f"{label}: full defaults / mirror off {ratios['full_over_mirror_off']}x "
            f"({runs['full']['run_seconds']} s / {runs['variants'][MIRROR_OFF]['full']['run_seconds']} s), CPU "
            f"defaults / mirror off {ratios['cpu_over_mirror_off']}; "
            f"over the floor: full {floors['full']}x, no change {floors['no_change']}x, 1% change "
            f"{floors['one_percent']}x (mirror off: {ratios['over_floor_mirror_off']}); peak RSS MiB (process, tree) "
            f"{ratios['peak_rss_mib']} (mirror off: {ratios['peak_rss_mib_mirror_off']}); steps lms_raw "
            f"(defaults, off) {ratios['raw_step_seconds']}, lake/iceberg_tables {ratios['mirror_step_seconds']}"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| selection | run | wall s (run / process) | CPU s | outside steps s | rows fetched | requests | "
        "floor s | over the floor s | peak RSS MiB (process tree RSS; PSS) | share of full (floor's) | rows/s: "
        + ", ".join(STREAMS)
        + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # CPU s: run_sync's (process's)
    for label, runs in results["selections"].items():
        for kind in RUN_KINDS:
            run = runs.get(kind)
            if run is None:
                continue
            if "error" in run:
                lines.append(
                    f"| {label} | {kind} | FAILED after {run['process_seconds']} s | | | | | | | "
                    f"{run['peak_rss_mib']} | | {run['error'].splitlines()[-1][:120]} |"
                )
                continue
            rates = ", ".join(f"{run['streams'].get(t, {}).get('rows_per_second', '-')}" for t in STREAMS)
            floor = run.get("floor", {})
            share = (
                f"{run['share_of_full']:.2%} ({run['floor_share_of_full']:.2%})"
                if "share_of_full" in run and "floor_share_of_full" in run
                else run.get("share_of_full", "-")
            )
            lines.append(
                f"| {label} | {kind} | {run['run_seconds']} / {run['process_seconds']} | "
                f"{run.get('run_cpu_seconds', '-')} ({run.get('cpu_seconds', '-')}) | {run['outside_steps_seconds']} | {run['rows_fetched']:,} | "
                f"{run.get('requests_recorded', run['requests']):,} | {floor.get('run_seconds', '-')} | "
                f"{run.get('overhead_over_floor_s', '-')} | {run['peak_rss_mib']} ({run.get('peak_tree_rss_mib', '-')}; {run.get('peak_tree_pss_mib', '-')}) | "
                f"{share} | {rates} |"
            )
    return "\n".join(lines)


def requests_markdown(results: dict[str, Any]) -> str:
    """Every run's GETs by endpoint (ids folded): what the API's shape makes each run kind ask for."""
    lines = []
    for label, runs in results["selections"].items():
        kinds = [kind for kind in RUN_KINDS if "requests_by_endpoint" in runs.get(kind, {})]
        endpoints = sorted(
            {e for kind in kinds for e in runs[kind]["requests_by_endpoint"]},
            key=lambda e: -sum(runs[k]["requests_by_endpoint"].get(e, 0) for k in kinds),
        )
        lines += [f"| {label}: GETs by endpoint | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        lines += [
            f"| `{e}` | " + " | ".join(f"{runs[k]['requests_by_endpoint'].get(e, 0):,}" for k in kinds) + " |"
            for e in endpoints
        ]
        lines.append("")
    return "\n".join(lines)


def render_section(results: dict[str, Any]) -> str:
    """The generated section of docs/BENCHMARKS.md for this scale (one per scale)."""
    latency = results.get("latency_ms")
    start, end = _markers(_variant(results["scale"], latency))
    loads = [round(results["load_average_at_start"][0], 2), round(results.get("load_average_now", [0])[0], 2)]
    option = f" --latency-ms {latency:g} --page-size {results['page_size']}" if latency else ""
    where = f", {latency:g} ms a request, page size {results['page_size']}" if latency else ""
    lines = [
        start,
        "",
        f"### Scale {results['scale']}{where}, every run beside its floor: "
        f"`python -m bench.sync_bench --scale {results['scale']}{option}`",
        "",
        "_Generated by `bench/sync_bench.py` from `bench/results/sync_<scale>[_<latency>ms].json` (GETs by endpoint "
        "there too); regenerating replaces only this section._ "
        f"{results['date']}, {results['cpus']} cores, 1-minute load average {loads[0]} at the start and "
        f"{loads[1]} at the end. Floor: the bare download of the run's own GETs; CPU s: the sync process's "
        "threads during run_sync (in brackets: the whole process's, imports included).",
        "",
        markdown(results),
        "",
    ]
    # The benchmark keeps two processes busy itself (the simulator and the sync): only a load past that is other work
    if max(loads) > results["cpus"] + 1:
        lines += [
            f"**Taken on a shared, overloaded machine** (load average up to {max(loads):g} on "
            f"{results['cpus']} cores): seconds are not benchmark results; requests, CPU seconds and peak RSS "
            "hold.",
            "",
        ]
    lines.append(end)
    return "\n".join(lines)


def _variant(scale: str, latency_ms: float | None) -> str:
    """`medium`, or `medium_40ms` for a run against a simulator answering each request after `latency_ms`."""
    return scale if not latency_ms else f"{scale}_{latency_ms:g}ms"


def _markers(variant: str) -> tuple[str, str]:
    return f"<!-- sync-{variant}:start -->", f"<!-- sync-{variant}:end -->"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="large", choices=["tiny", "small", "medium", "large"])
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each on a fresh data dir")
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        help="asset selection, one benchmark sequence each (default 'key:lms/*'); repeatable",
    )
    parser.add_argument(
        "--work-dir", type=created_directory, help="data dirs go here (default: a temp dir, removed after)"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="the simulator answers each request after this long, like "
        "a real network (the nightly runs' figures as production sees them); results and docs "
        "section of their own",
    )
    parser.add_argument("--page-size", type=int, help="LESSONSYNC_PAGE_SIZE of the syncs (default: the product's)")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/BENCHMARKS.md")
    parser.add_argument(
        "--mirror-off-too",
        action="store_true",
        help="run each run kind also with LESSONSYNC_TABLE_FORMAT=none and print the goals' ratios",
    )
    parser.add_argument(
        "--no-change-rounds",
        type=int,
        default=NO_CHANGE_ROUNDS,
        help="no-change syncs in a row, each beside its floor; the one with the median ratio is reported",
    )
    parser.add_argument(
        "--no-warm-up", action="store_true", help="skip the full sync that warms the simulator first (not measured)"
    )
    parser.add_argument(
        "--dagster-storage",
        choices=["ephemeral", "sqlite"],
        default="ephemeral",
        help="the syncs' Dagster instance: ephemeral (in memory), or sqlite: a persistent one in a DAGSTER_HOME "
        "of each data dir, with LessonSync's dagster.yaml, as `lessonsync sync` runs (results file of its own)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--urls", help=argparse.SUPPRESS)
    parser.add_argument("--full-refresh", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    selections = args.select or ["key:lms/*"]
    if args.page_size:
        os.environ["LESSONSYNC_PAGE_SIZE"] = str(args.page_size)  # the sync children inherit it
    if args.child:
        print(json.dumps(sync_child(selections, args.urls, args.full_refresh), default=str))
        return 0
    os.environ[STORAGE_ENV] = args.dagster_storage  # the sync children inherit it
    with tempfile.TemporaryDirectory(prefix="sync_bench_", dir=args.work_dir) as work:
        results = run_all(
            args.scale,
            selections,
            args.repeat,
            Path(work),
            args.latency_ms,
            args.mirror_off_too,
            warm_up=not args.no_warm_up,
            no_change_rounds=args.no_change_rounds,
        )
    print(markdown(results))
    print(requests_markdown(results))
    print(ratios_markdown(results))
    if args.no_docs or os.environ.get("LESSONSYNC_DUCKDB_MEMORY_LIMIT") or args.dagster_storage != "ephemeral":
        return 0  # the generated sections hold the default limit's figures on an ephemeral instance
    write_doc_section(DOC, *_markers(_variant(args.scale, args.latency_ms)), render_section(results))
    return 0


def run_all(
    scale: str,
    selections: list[str],
    repeat: int,
    work_dir: Path,
    latency_ms: float | None = None,
    mirror_off_too: bool = False,
    *,
    warm_up: bool = True,
    no_change_rounds: int = NO_CHANGE_ROUNDS,
) -> dict[str, Any]:
    port = free_port()
    began = time.perf_counter()
    server = start_simulator(scale, port, latency_ms)
    base_url = f"http://127.0.0.1:{port}"
    results: dict[str, Any] = {
        "scale": scale,
        "latency_ms": latency_ms,
        "page_size": os.environ.get("LESSONSYNC_PAGE_SIZE", "default"),
        "date": date.today().isoformat(),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "simulator_startup_s": round(time.perf_counter() - began, 1),
        "duckdb_memory_limit": os.environ.get("LESSONSYNC_DUCKDB_MEMORY_LIMIT", "default"),
        "dagster_storage": os.environ.get(STORAGE_ENV, "ephemeral"),
        "counts": httpx.get(f"{base_url}/_sim/counts", timeout=60).json(),
        "selections": {},
    }
    memory_limit = os.environ.get("LESSONSYNC_DUCKDB_MEMORY_LIMIT")  # a second data point, kept apart
    storage = "" if results["dagster_storage"] == "ephemeral" else f"_{results['dagster_storage']}"
    out = RESULTS / f"sync_{_variant(scale, latency_ms)}{f'_mem{memory_limit}' if memory_limit else ''}{storage}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)  # git-ignored: absent from a fresh clone

    def save(label: str, runs: dict[str, Any]) -> None:
        results["selections"][label] = runs
        results["load_average_now"] = os.getloadavg()
        out.write_text(json.dumps(results, indent=2, default=str))

    try:
        if warm_up:
            results["warm_up_seconds"] = warm_up_simulator(selections[0], base_url, work_dir)
        for round_number in range(repeat):
            for select in selections:
                label = select if repeat == 1 else f"{select} #{round_number + 1}"
                bench_selection(
                    [select],
                    base_url,
                    work_dir,
                    label.replace("/", "_").replace(":", "_").replace("*", "all").replace(" #", "_"),
                    save,
                    mirror_off_too,
                    no_change_rounds,
                )
    finally:
        server.terminate()
        server.wait(timeout=60)
    return results


if __name__ == "__main__":
    raise SystemExit(main())
