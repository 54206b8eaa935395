"""Benchmark of the whole `lessonsync sync` command, interpreter start to exit (not a test): against ONE local
stack (simulator and webhook receiver, pipeline/stack.py) started once in this process, a full sync into a fresh
data dir, then at once a no-change sync, then after 24 simulated hours (~1% of active lessons change) a 1%-change
sync, each the installed console script in a child process. A full sync into a data dir of its own comes first,
unmeasured: the simulator and the OS's caches are then as warm for the measured full run as for the others; every
run reads the installed bytecode (bench/common.py installed_bytecode).

Time to first request: the simulator's request log stamps every request's arrival on the machine's monotonic clock,
the clock this process reads right before it starts the command; no marker in the command is needed. Per run: the
command's wall and CPU seconds and peak RSS (its own: bench/common.py PeakRss), the time from its start to its first
request (the token exchange) and to its first GET, the requests the simulator answered, the Dagster runs it created
and the events they wrote (read back through the same instance: a run's fixed cost is about one storage write an
event), whether the warehouse then equals the platform, and the run's floor: the bare download of the same GETs by
bench/common.py (page 0 of the first-page probe, which answers 400, and the token left out); and Dagster alone: the
same runs, steps, materializations, checks and log lines replayed by assets that do nothing (bench/dagster_alone.py),
a process of its own, interpreter start to exit, on a Dagster home of its own with the same storage. The rest of
the command's time is our own work, also reported as a share of the full command's rest. Then the ratios the
issue sets: no-change / full (at most 0.25) and 1%-change / full (at most 0.50), and each run's wall time over its
floor (the latency-bound target: 1.35 at scale medium, 40 ms a request, page size 100).

Results go to bench/results/start_<scale>[_<latency>ms].json; the summary is printed. Seconds on a loaded machine
are only indicative (the load average is recorded): the ratios, requests, CPU seconds and peak RSS hold better.

    .venv/bin/python -m bench.start_bench                                      # scale small
    .venv/bin/python -m bench.start_bench --scale medium --latency-ms 40 --page-size 100
    .venv/bin/python -m bench.start_bench --postgres       # Dagster's storage in PostgreSQL, as deployed

`--postgres` starts a PostgreSQL server of its own (tests/remote/remote_servers.py: the machine's initdb and pg_ctl,
fsync off) and gives each command `LESSONSYNC_DAGSTER_POSTGRES_URL`: the instance storage docs/deploy.md sets up,
where the default is SQLite in the data dir. The warm-up has a database of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import (
    ChildRun,
    PeakRss,
    created_directory,
    installed_bytecode,
    load_average,
    run_bare_download,
    run_measured,
)

RESULTS = Path(__file__).resolve().parent / "results"
RUN_KINDS = ("full", "no_change", "one_percent")
TARGETS = {"no_change": 0.25, "one_percent": 0.50}  # share of the full sync's wall time
FLOOR_TARGET = 1.35  # the whole command over the bare download of its pages, latency-bound (scale medium, 40 ms)
TOKEN_PATH = "/v1/token"
COMMAND = [str(Path(sys.executable).with_name("lessonsync")), "sync"]
ALONE_ROUNDS = 3  # timed replays of each command's runs (Dagster alone): one round swings by a third on a busy machine
SAMPLE_SECONDS = 0.01  # how often the command's CPU time is read (the kernel counts it in 10 ms ticks)


def run_command(
    stack: Any,
    data_dir: Path,
    work: Path,
    kind: str,
    concurrency: int,
    extra_env: dict[str, str],
    alone_env: dict[str, str],
) -> dict[str, Any]:
    """One `lessonsync sync` in a child process: its wall time from just before the start, first requests, peak RSS,
    CPU seconds, exactness, and the bare download of its GETs."""
    env = {**command_env(stack, work), **extra_env}
    requests_before = len(stack.sim.request_log())
    load_before = load_average()
    created_after = datetime.now(UTC)
    began = time.monotonic()
    child, cpu_at = run_sampled(COMMAND, env, log=work / f"{kind}.log")
    sides = {
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "peak_rss_mib": child.peak_rss_mib,
        "process_seconds": child.seconds,
        "cpu_seconds": child.cpu_seconds,
    }
    requests = [r for r in stack.sim.request_log() if r.arrived >= began]
    if len(requests) + requests_before >= 100_000:
        print(f"[{kind}] the simulator's request log is full: first-request times may be missing", file=sys.stderr)
    result: dict[str, Any] = {"returncode": child.returncode, **sides, "dagster_events": _events(env, created_after)}
    if child.returncode != 0:
        return {**result, "error": child.stderr_tail}
    result["dagster_alone"] = _dagster_alone(
        env, result["dagster_events"]["run_shapes"], work / "dagster_alone", alone_env
    )
    gets = [r for r in requests if r.path.split("?", 1)[0] != TOKEN_PATH and "pageNumber=0&" not in r.path + "&"]
    result.update(
        {
            "first_request_s": round(min(r.arrived for r in requests) - began, 3) if requests else None,
            # the command's own CPU seconds by then: on a busy machine, what the wall time would be on a quiet one
            "first_request_cpu_s": _cpu_by(cpu_at, min(r.arrived for r in requests)) if requests else None,
            "first_get_s": round(min(r.arrived for r in gets) - began, 3) if gets else None,
            "last_answer_to_exit_s": round(began + child.seconds - max(r.answered for r in requests), 3)
            if requests
            else None,
            "requests": len(requests),
            "exact": _exact(stack, data_dir),
        }
    )
    urls_file = work / f"{kind}.urls"
    urls_file.write_text("\n".join(r.path for r in gets))
    floor = run_bare_download(stack.sim.base_url, str(urls_file), concurrency)
    result["floor"] = floor
    if "error" not in floor and floor["run_seconds"] > 0:
        result["over_floor"] = round(child.seconds / floor["run_seconds"], 2)
    return result


def command_env(stack: Any, work: Path) -> dict[str, str]:
    return installed_bytecode({**os.environ, **stack.run_env(), "DAGSTER_HOME": str(work / "dagster_home")})


def run_sampled(
    argv: list[str], env: dict[str, str], log: Path | None = None
) -> tuple[ChildRun, list[tuple[float, float]]]:
    """bench/common.py's run_measured (its peak RSS the child's own: PeakRss), with the child's CPU seconds (user + system, from /proc) sampled every
    SAMPLE_SECONDS meanwhile: (monotonic instant, CPU seconds so far). `log`: where the child's whole stderr is kept
    (its timestamped lines tell where the time went; kept with --work-dir)."""
    samples: list[tuple[float, float]] = []
    ticks = os.sysconf("SC_CLK_TCK")
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        stat = Path(f"/proc/{child.pid}/stat")

        def sample() -> None:
            while True:
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    return
                if fields[0] == "Z":  # exited, not yet waited for
                    return
                samples.append((time.monotonic(), (int(fields[11]) + int(fields[12])) / ticks))
                time.sleep(SAMPLE_SECONDS)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        peak_mib = PeakRss(child.pid).at_exit()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        sampler.join()
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        if log is not None:
            log.write_text(stderr)
        tail = "\n".join(stderr.strip().splitlines()[-12:])
        out.seek(0)
        run = ChildRun(
            os.waitstatus_to_exitcode(status),
            out.read(),
            tail,
            round(seconds, 2),
            peak_mib,
            round(usage.ru_utime + usage.ru_stime, 2),
        )
    return run, samples


def _events(env: dict[str, str], created_after: datetime) -> dict[str, Any]:
    """What the command wrote to Dagster's event log (the fixed cost of a run: one storage write an event), read
    back through the instance the command used: its runs, their events, and the events by type (LOG_MESSAGE: a log line);
    and the runs' shapes, for Dagster alone."""
    from dagster import DagsterInstance, RunsFilter

    from bench.dagster_alone import run_shapes
    from pipeline.instance import POSTGRES_URL_VARIABLE, with_psycopg2_driver
    from pipeline.stack import environment

    wanted = {"DAGSTER_HOME": env["DAGSTER_HOME"]}
    if POSTGRES_URL_VARIABLE in env:  # as the command itself reads it (pipeline/instance)
        wanted[POSTGRES_URL_VARIABLE] = with_psycopg2_driver(env[POSTGRES_URL_VARIABLE])
    by_type: dict[str, int] = {}
    with environment(wanted), DagsterInstance.get() as instance:
        runs = instance.get_runs(filters=RunsFilter(created_after=created_after))
        for run in runs:
            for entry in instance.all_logs(run.run_id):
                name = str(entry.dagster_event_type.value) if entry.dagster_event_type else "LOG_MESSAGE"
                by_type[name] = by_type.get(name, 0) + 1
        shapes = run_shapes(instance, [run.run_id for run in reversed(runs)])  # get_runs: newest first
    ordered = dict(sorted(by_type.items(), key=lambda item: -item[1]))
    return {
        "runs": len(runs),
        "events": sum(by_type.values()),
        "by_type": ordered,
        "run_shapes": [asdict(shape) for shape in shapes],
    }


def _dagster_alone(
    env: dict[str, str], shapes: list[dict[str, Any]], home: Path, storage: dict[str, str]
) -> dict[str, Any]:
    """The command's runs (`shapes`, from _events) replayed by bench/dagster_alone.py on a Dagster home of its own
    (the same dagster.yaml, `storage`: a PostgreSQL database of its own with --postgres): on a new home once
    untimed, to create its databases, then ALONE_ROUNDS times, each timed interpreter start to exit; the median
    round is reported."""
    from pipeline.instance import POSTGRES_URL_VARIABLE, instance_config, with_psycopg2_driver

    untimed = 0 if (home / "dagster.yaml").exists() else 1
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(instance_config(POSTGRES_URL_VARIABLE in env), encoding="utf-8")
    shape_file = home.parent / "dagster_alone_shape.json"
    shape_file.write_text(json.dumps(shapes))
    child_env = {**env, **storage, "DAGSTER_HOME": str(home)}
    if POSTGRES_URL_VARIABLE in child_env:
        child_env[POSTGRES_URL_VARIABLE] = with_psycopg2_driver(child_env[POSTGRES_URL_VARIABLE])
    argv = [sys.executable, "-m", "bench.dagster_alone", str(shape_file)]
    replays = []
    for _ in range(untimed + ALONE_ROUNDS):
        replayed = run_measured(argv, child_env)
        if replayed.returncode != 0:
            return {"error": replayed.stderr_tail}
        replays.append(replayed)
    timed = sorted(replays[untimed:], key=lambda r: r.seconds)
    median = timed[len(timed) // 2]
    return {
        "seconds": median.seconds,
        "cpu_seconds": median.cpu_seconds,
        "rounds": [r.seconds for r in replays[untimed:]],
        "steps": sum(len(run["steps"]) for run in shapes),
    }


def _cpu_by(samples: list[tuple[float, float]], instant: float) -> float | None:
    """The CPU seconds of the last sample taken before `instant`."""
    before = [cpu for at, cpu in samples if at <= instant]
    return round(before[-1], 2) if before else None


def _exact(stack: Any, data_dir: Path) -> bool:
    import duckdb

    from pipeline.settings import load_settings
    from pipeline.verify import compare_warehouse

    with duckdb.connect(str(load_settings(data_dir=data_dir).warehouse_path), read_only=True) as conn:
        return all(diff.equal for diff in compare_warehouse(conn, stack.sim))


def measure(
    scale: str, latency_ms: float | None, page_size: int | None, work: Path, postgres: Any = None
) -> dict[str, Any]:
    """`postgres`: a tests/remote/remote_servers.py PostgresServer to keep Dagster's storage in, else SQLite."""
    from pipeline.settings import load_settings
    from pipeline.stack import local_stack

    concurrency = load_settings().concurrency
    faults = f"latency_ms={latency_ms:g}" if latency_ms else ""
    result: dict[str, Any] = {
        "scale": scale,
        "latency_ms": latency_ms,
        "page_size": page_size,
        "dagster_storage": "postgres" if postgres is not None else "sqlite",
        "cpus": os.cpu_count(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_at_start": load_average(),
        "runs": {},
    }
    data_dir = work / "data"
    with local_stack(data_dir, scale=scale, faults=faults, page_size=page_size) as stack:
        # A full sync into a data dir of its own first, not measured: the simulator and the OS's caches are then as
        # warm for the measured full run as for the runs after it.
        print(f"[{scale}] warm-up sync (not measured) ...", file=sys.stderr, flush=True)
        warm_up = work / "warm_up"
        env = {**command_env(stack, work), "DAGSTER_HOME": str(warm_up / "dagster_home")}
        env.update(_dagster_storage(postgres, "warm_up"))
        env["LESSONSYNC_DATA_DIR"] = str(warm_up / "data")
        warmed, _ = run_sampled(COMMAND, env)
        if warmed.returncode != 0:
            raise SystemExit(f"the warm-up sync failed: {warmed.stderr_tail}")
        storage = _dagster_storage(postgres, "measured")
        alone_storage = _dagster_storage(postgres, "dagster_alone")
        for kind in RUN_KINDS:
            if kind == "one_percent":
                result["advance_activity"] = stack.advance(hours=24)
            print(f"[{scale}] {kind} sync ...", file=sys.stderr, flush=True)
            run = result["runs"][kind] = run_command(stack, data_dir, work, kind, concurrency, storage, alone_storage)
            print(f"[{scale}] {kind}: {_line(run)}", file=sys.stderr, flush=True)
            if "error" in run:
                break
    result["load_average_at_end"] = load_average()
    full = result["runs"]["full"].get("process_seconds")
    for kind, target in TARGETS.items():
        run = result["runs"].get(kind, {})
        if full and "error" not in run and "process_seconds" in run:
            run["share_of_full"] = round(run["process_seconds"] / full, 3)
            run["share_target"] = target
    full_alone = result["runs"]["full"].get("dagster_alone", {}).get("seconds")
    for run in result["runs"].values():
        alone = run.get("dagster_alone", {})
        if full and "seconds" in alone:
            alone["share_of_full"] = round(alone["seconds"] / full, 3)
            # what the command costs beyond Dagster's runs, over the same for the full command
            if full_alone is not None and full > full_alone and "process_seconds" in run:
                alone["rest_share_of_full_rest"] = round(
                    (run["process_seconds"] - alone["seconds"]) / (full - full_alone), 3
                )
    return result


def _dagster_storage(postgres: Any, database: str) -> dict[str, str]:
    """The environment that puts a command's Dagster storage in a database of `postgres`; none for SQLite."""
    if postgres is None:
        return {}
    return {"LESSONSYNC_DAGSTER_POSTGRES_URL": postgres.create_database(database)}


def _line(run: dict[str, Any]) -> str:
    if "error" in run:
        return f"FAILED after {run['process_seconds']} s: {run['error'].splitlines()[-1][:200]}"
    return (
        f"{run['process_seconds']} s (CPU {run['cpu_seconds']} s), first request {run['first_request_s']} s "
        f"({run['first_request_cpu_s']} s CPU), "
        f"first GET {run['first_get_s']} s, {run['requests']} requests, peak RSS {run['peak_rss_mib']} MiB, "
        f"floor {run['floor'].get('run_seconds', 'FAILED')} s (x{run.get('over_floor', '?')}), exact {run['exact']}, "
        f"{run['dagster_events']['events']} Dagster events in {run['dagster_events']['runs']} run(s), "
        f"Dagster alone {_alone(run)} s"
    )


def _alone(run: dict[str, Any]) -> str:
    alone = run.get("dagster_alone", {})
    if "seconds" not in alone:
        return "FAILED" if "error" in alone else "-"
    share = f" ({alone['share_of_full']:.2f})" if "share_of_full" in alone else ""
    rest = (
        f"; the rest {alone['rest_share_of_full_rest']:.2f} of the full's" if "rest_share_of_full_rest" in alone else ""
    )
    return f"{alone['seconds']}{share}{rest}"


def summary(result: dict[str, Any]) -> str:
    where = f", {result['latency_ms']:g} ms a request" if result["latency_ms"] else ""
    lines = [
        f"`lessonsync sync`, whole command, scale {result['scale']}{where}, Dagster storage "
        f"{result.get('dagster_storage', 'sqlite')}; load average "
        f"{result['load_average_at_start'][0]} at the start, {result['load_average_at_end'][0]} at the end "
        f"({result['cpus']} cores)",
        "| run | wall s | CPU s | first request s (CPU s by then) | first GET s | requests | peak RSS MiB | floor s | "
        "x floor | "
        "share of full (target) | exact | Dagster runs / events | Dagster alone s (share of full) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, run in result["runs"].items():
        if "error" in run:
            lines.append(
                f"| {kind} | FAILED after {run['process_seconds']} | | | | | {run['peak_rss_mib']} | | | | | | |"
            )
            continue
        share = f"{run['share_of_full']:.2f} ({run['share_target']:.2f})" if "share_of_full" in run else "-"
        lines.append(
            f"| {kind} | {run['process_seconds']} | {run['cpu_seconds']} | {run['first_request_s']} "
            f"({run['first_request_cpu_s']}) | "
            f"{run['first_get_s']} | {run['requests']:,} | {run['peak_rss_mib']} | "
            f"{run['floor'].get('run_seconds', '-')} | {run.get('over_floor', '-')} | {share} | {run['exact']} | "
            f"{run['dagster_events']['runs']} / {run['dagster_events']['events']:,} | {_alone(run)} |"
        )
    return "\n".join(lines)


@contextmanager
def _postgres(wanted: bool) -> Iterator[Any]:
    """A PostgreSQL server of this benchmark's own (tests/remote/remote_servers.py), or None."""
    if not wanted:
        yield None
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "remote"))
    from remote_servers import postgres_server, why_postgres_cannot_run

    if reason := why_postgres_cannot_run():
        raise SystemExit(reason)
    with postgres_server() as server:
        yield server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="small", choices=("tiny", "small", "medium", "large"))
    parser.add_argument("--latency-ms", type=float, default=None, help="every request's latency at the simulator")
    parser.add_argument("--page-size", type=int, default=None, help="LESSONSYNC_PAGE_SIZE (default: the setting's)")
    parser.add_argument(
        "--work-dir", type=created_directory, default=None, help="kept afterwards (default: a temp dir)"
    )
    parser.add_argument("--postgres", action="store_true", help="Dagster's storage in a PostgreSQL server of its own")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="start_bench_") as temp, _postgres(args.postgres) as postgres:
        work = args.work_dir or Path(temp)
        work.mkdir(parents=True, exist_ok=True)
        result = measure(args.scale, args.latency_ms, args.page_size, work, postgres)
    RESULTS.mkdir(exist_ok=True)
    suffix = f"_{args.latency_ms:g}ms" if args.latency_ms else ""
    suffix += "_postgres" if args.postgres else ""
    out = RESULTS / f"start_{args.scale}{suffix}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    print(f"results: {out}", file=sys.stderr)
    failed = any("error" in run or not run.get("exact") for run in result["runs"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
