"""Soak at default settings: on ONE data directory and ONE Dagster home, the operations users need after an
incident, each repeated and each verified exact against the simulator's ground truth (the answer tables as hashes
in DuckDB, bench/exactness.py; the others field by field, pipeline/verify.py):

  full refresh   `lessonsync sync --full-refresh`
  backfill       the `backfill_progress` job over the last `--days` days, through Dagster
                 (`dagster job execute -m pipeline.definitions -c <Launchpad config>`), recorded in the Dagster home
  rebuild --into `lessonsync rebuild --into <new file>`, the new file verified, then removed

Rounds interleave the three (so each runs after the others). Every operation is a child process started with
only the stack's LESSONSYNC_* settings (no memory limit, no threads: the defaults); its process tree's summed RSS
is sampled every 50 ms. Prints, per operation, passes out of runs and the peak RSS of each run.

    .venv/bin/python -m bench.soak --scale small [--rounds 5] [--days 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import duckdb
import psutil

from bench.exactness import TABLES as HASHED_TABLES
from bench.exactness import Truth
from pipeline.stack import Stack, local_stack
from pipeline.verify import compare_warehouse, verified_tables

BIN = Path(sys.executable).parent
OPERATIONS = ("full refresh", "backfill", "rebuild --into")


@dataclass
class Outcome:
    runs: int = 0
    passed: int = 0
    peaks_mib: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def tree_rss_mib(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
    return total / 2**20


def run_sampled(argv: list[str], env: dict[str, str]) -> tuple[int, str, float, float]:
    """(exit code, last output line, peak RSS of the process tree in MiB, seconds)."""
    began = time.monotonic()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = 0.0
        while child.poll() is None:
            peak = max(peak, tree_rss_mib(child.pid))
            time.sleep(0.05)
        out.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
    return child.returncode, (lines[-1] if lines else ""), round(peak, 1), round(time.monotonic() - began, 1)


def unequal_tables(stack: Stack, truth: Truth, warehouse: Path) -> list[str]:
    """The answer tables are compared as hashes inside DuckDB in a child process (bench/exactness.py): at scale
    large a comparison in Python holds every row. The other tables are small and go through pipeline/verify.py."""
    verdict = truth.check(warehouse, "lessonsync")
    unequal = [f"{table}: {check}" for table, check in verdict["tables"].items() if not check["equal"]]
    with duckdb.connect(str(warehouse), read_only=True) as conn:
        small_tables = [t for t in verified_tables() if t not in HASHED_TABLES]
        return unequal + [d.summary() for d in compare_warehouse(conn, stack.sim, small_tables) if not d.equal]


def child_env(stack: Stack, home: Path) -> dict[str, str]:
    """This process's environment without any LESSONSYNC_ setting, plus the stack's: the defaults elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_")}
    return {**env, **stack.run_env(), "DAGSTER_HOME": str(home)}


def soak(scale: str, rounds: int, days: int, data_dir: Path) -> dict[str, Outcome]:
    outcomes = {name: Outcome() for name in OPERATIONS}
    home = data_dir / "dagster_home"
    with local_stack(data_dir, scale=scale) as stack:
        env = child_env(stack, home)
        subprocess.run([str(BIN / "python"), "-m", "pipeline.instance"], env=env, check=True, capture_output=True)
        truth = Truth(data_dir, stack.sim.base_url, "soak")
        last = stack.sim.now().date()
        config = data_dir / "backfill.yaml"
        config.write_text(
            "resources:\n  backfill:\n    config: "
            f'{{updated_from: "{last - timedelta(days=days - 1)}", updated_to: "{last}"}}\n'
        )
        rebuilt = data_dir / "rebuilt.duckdb"
        commands = {
            "full refresh": [str(BIN / "lessonsync"), "sync", "--full-refresh"],
            "backfill": [
                *(str(BIN / "dagster"), "job", "execute", "-m", "pipeline.definitions"),
                *("-j", "backfill_progress", "-c", str(config)),
            ],
            "rebuild --into": [str(BIN / "lessonsync"), "rebuild", "--into", str(rebuilt)],
        }
        for round_no in range(1, rounds + 1):
            for name in OPERATIONS:
                rebuilt.unlink(missing_ok=True)
                code, last_line, peak, seconds = run_sampled(commands[name], env)
                target = rebuilt if name == "rebuild --into" else stack.warehouse_path
                problem = f"exit {code}: {last_line}" if code else None
                if problem is None:
                    unequal = unequal_tables(stack, truth, target)
                    problem = f"not exact: {'; '.join(unequal)}" if unequal else None
                outcome = outcomes[name]
                outcome.runs += 1
                outcome.peaks_mib.append(peak)
                outcome.seconds.append(seconds)
                if problem is None:
                    outcome.passed += 1
                else:
                    outcome.failures.append(f"round {round_no}: {problem[:400]}")
                status = "ok" if problem is None else f"FAILED ({problem[:200]})"
                print(
                    f"round {round_no} {name:15} {seconds:6.1f} s  peak tree RSS {peak:7.1f} MiB  {status}", flush=True
                )
        rebuilt.unlink(missing_ok=True)
        truth.close()
    return outcomes


def report(outcomes: dict[str, Outcome], scale: str) -> str:
    lines = [f"soak at scale {scale}, default settings, load average {[round(x, 2) for x in os.getloadavg()]}:"]
    for name, o in outcomes.items():
        peaks = ", ".join(f"{p:.0f}" for p in o.peaks_mib)
        lines.append(
            f"  {name:15} {o.passed}/{o.runs} passed; peak tree RSS max {max(o.peaks_mib, default=0):.0f} MiB "
            f"(runs: {peaks}); {sum(o.seconds) / max(1, len(o.seconds)):.1f} s a run"
        )
        lines.extend(f"    {failure}" for failure in o.failures)
    total = sum(o.runs for o in outcomes.values())
    lines.append(f"  total: {total - sum(len(o.failures) for o in outcomes.values())}/{total} passed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="small", choices=("tiny", "small", "medium", "large"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--days", type=int, default=30, help="the backfill's range: the last DAYS days")
    parser.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory, removed after")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="lessonsync-soak-"))
    try:
        outcomes = soak(args.scale, args.rounds, args.days, data_dir)
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    print(report(outcomes, args.scale))
    return 0 if all(not o.failures for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
