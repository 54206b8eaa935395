"""Interleaved A/B of two checkouts, or of two settings: the same sync, alternately by this checkout and another (a
git worktree of an older commit), or by this checkout at its defaults and with `--other-env` set, each a fresh
process on its own copy of one warehouse and a simulator of its own in the same state. On a machine whose speed
drifts from hour to hour (ours: ~40%), back-to-back benchmark runs cannot show a 20% change; pairs run a few seconds
apart can: each pair's ratio is printed, and the median of those ratios.

    git worktree add /tmp/before <commit>
    python -m bench.ab_bench --other /tmp/before --scale large --kind no_change --pairs 5 --data <data dir>
    python -m bench.ab_bench --other-env LESSONSYNC_TABLE_FORMAT=none --scale large --kind full --pairs 3

`--data`: a data directory after a full sync (never changed); without it one is made first with a full sync and
a no-change sync of this checkout (minutes at scale large). Each checkout then makes its own copy of it with one
no-change sync (its page cache warm for its own code), and every run of that checkout starts from a copy of that. `--kind one_percent`
advances the simulator by 24 hours before the sync, as bench/sync_bench.py does. The child is
this file with `--child KIND SCALE WORK DATA`, run with the checkout as working directory and PYTHONPATH."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import free_port, start_simulator

KINDS = ("full", "no_change", "one_percent")


def child(kind: str, scale: str, work: Path, data: Path | None) -> None:
    """One sync of `kind` in this process (this checkout's code); prints its run_sync seconds."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "home").mkdir(parents=True)
    if data is not None:
        shutil.copytree(data, work / "data")
    port = free_port()
    simulator = start_simulator(scale, port)
    url = f"http://127.0.0.1:{port}"
    os.environ.update(
        {"LESSONSYNC_BASE_URL": url, "LESSONSYNC_DATA_DIR": str(work / "data"), "DAGSTER_HOME": str(work / "home")}
    )
    try:
        if kind == "one_percent":
            httpx.post(f"{url}/_sim/advance", params={"hours": 24}, timeout=600).raise_for_status()
        import pipeline.memory

        # The process set up as that checkout's `lessonsync sync` sets up its own; older checkouts do not pause.
        pause_collections = getattr(pipeline.memory, "pause_collections", None)
        if pause_collections is not None:
            pause_collections()
        from dagster import DagsterInstance

        importlib.import_module("pipeline.defs.code_location")  # as a run worker has it before its run
        from pipeline.settings import load_settings
        from pipeline.sync import run_sync

        instance = DagsterInstance.ephemeral()  # before the clock starts, as bench/sync_bench.py does
        began = time.perf_counter()
        report = run_sync(load_settings(), select=["key:lms/*"], instance=instance)
        seconds = time.perf_counter() - began
        if not report.success:
            raise SystemExit(f"sync failed: {report.error}")
        print(f"{seconds:.3f}")
    finally:
        simulator.terminate()


def one_run(
    checkout: Path, kind: str, scale: str, work: Path, data: Path | None, settings: dict[str, str] | None = None
) -> float:
    env = {**os.environ, **(settings or {}), "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # this file, run against the checkout's code: an older checkout may not have it
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind, scale, str(work), str(data or "")]
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {kind} sync failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def prepared_data(scale: str, root: Path) -> Path:
    """A data directory after a full and a no-change sync of this checkout."""
    here = Path(__file__).resolve().parent.parent
    print(f"making a {scale} warehouse in {root} (a full sync, then a no-change sync) ...", file=sys.stderr)
    one_run(here, "full", scale, root / "made", None)
    one_run(here, "no_change", scale, root / "again", root / "made" / "data")
    return root / "again" / "data"


def warmed(checkout: Path, scale: str, work: Path, data: Path, settings: dict[str, str]) -> Path:
    """A copy of `data` after one no-change sync by `checkout` in `work`, where that checkout's measured runs sync
    too. The page cache (pipeline/source/page_cache.py) is keyed by the decoding code, so a data directory from
    another checkout's run would be a cache of misses for this one: a first night after an upgrade, not the night
    after a night. The Iceberg catalog holds absolute paths: a data directory synced at another path is a moved one,
    which the mirror heals by writing every table whole (docs/lake-tables.md), so every run syncs at `work`."""
    one_run(checkout, "no_change", scale, work, data, settings)
    warm = work.with_name(f"{work.name}-warm")
    shutil.copytree(work / "data", warm)
    return warm


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        kind, scale, work, data = args[1:5]
        child(kind, scale, Path(work), Path(data) if data else None)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, help="the other checkout (e.g. a git worktree; default: this one)")
    parser.add_argument(
        "--other-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable set for the other side's runs only (repeatable): settings compared on one checkout",
    )
    parser.add_argument("--scale", default="medium")
    parser.add_argument("--kind", choices=KINDS, default="no_change")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--data", type=Path, help="a data directory after a full sync (default: made first)")
    options = parser.parse_args(args)
    here = Path(__file__).resolve().parent.parent
    if options.other is None and not options.other_env:
        parser.error("give --other, --other-env or both")
    try:
        other_env = dict(item.split("=", 1) for item in options.other_env)
    except ValueError:
        parser.error(f"--other-env takes NAME=VALUE, not {options.other_env}")
    envs = {"other": other_env, "this": {}}
    with tempfile.TemporaryDirectory(prefix="ab-bench-") as scratch:
        root = Path(scratch)
        sides = {"other": options.other or here, "this": here}
        data: dict[str, Path | None] = dict.fromkeys(sides)
        if options.kind != "full":
            template = options.data or prepared_data(options.scale, root)
            data = {
                side: warmed(checkout, options.scale, root / side, template, envs[side])
                for side, checkout in sides.items()
            }
        seconds: dict[str, list[float]] = {"other": [], "this": []}
        for pair in range(options.pairs):
            for side, checkout in sides.items():
                run = one_run(checkout, options.kind, options.scale, root / side, data[side], envs[side])
                seconds[side].append(run)
            print(
                f"pair {pair + 1}: other {seconds['other'][-1]:.2f} s, this {seconds['this'][-1]:.2f} s "
                f"(this / other {seconds['this'][-1] / seconds['other'][-1]:.3f})",
                file=sys.stderr,
            )
    other, this = (statistics.median(seconds[side]) for side in ("other", "this"))
    ratios = [round(b / a, 3) for a, b in zip(seconds["other"], seconds["this"], strict=True)]
    described = " ".join([str(options.other or "this checkout"), *options.other_env])
    print(
        f"{options.kind} at scale {options.scale}, {options.pairs} interleaved pairs: other ({described}) "
        f"median {other:.2f} s {seconds['other']}; this checkout median {this:.2f} s {seconds['this']}; "
        f"{(this - other) / other:+.1%}; this / other by pair {ratios}, median {statistics.median(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
