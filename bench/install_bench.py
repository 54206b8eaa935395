"""What each set of the wheel's extras costs (not a test): for each set, deploy/install.sh installs the wheel into a
new venv (at the dev venv's versions, as tests/deploy/ does), timed with uv's cache warm (a first install fills it;
`--cold` adds one from an empty cache, downloads included); then the venv's size (du -sm), its number of
distributions, and the peak RSS of a no-change `lessonsync sync` run from that venv against a tiny simulated
platform (after the full sync that fills the warehouse), default settings (the Iceberg mirror on). Results in
bench/results/install_bench.json and a table on stdout.

    .venv/bin/python -m bench.install_bench                    # the five sets: ~5 min
    .venv/bin/python -m bench.install_bench --set core= --set ui=ui --cold
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import load_average, run_measured
from pipeline.stack import local_stack

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "install_bench.json"
UV = Path(sys.executable).with_name("uv")
# name -> the extras install.sh gets: the core for cron, then what production adds (docs/deploy.md, "Installing")
SETS = {
    "core": "",
    "core+ui": "ui",
    "core+postgres+s3+ui": "postgres,s3,ui",
    "core+postgres+s3+ui+k8s": "postgres,s3,ui,k8s",
    "core+postgres+s3+ui+dbt": "postgres,s3,ui,dbt",
}
DROP = ("LESSONSYNC_", "DAGSTER_HOME", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_")  # the caller's settings


def clean_env(**more: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(DROP)}, **more}


def build_wheel(out: Path) -> Path:
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "build_wheel.sh"), str(ROOT), str(out)],
        env=clean_env(UV=str(UV)),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.splitlines()[-1])


def dev_versions(path: Path) -> Path:
    freeze = [str(UV), "pip", "freeze", "--exclude-editable", "--python", sys.executable]
    path.write_text(subprocess.run(freeze, capture_output=True, text=True, check=True).stdout)
    return path


def install(wheel: Path, venv: Path, extras: str, constraints: Path, cache: Path | None = None) -> float:
    """deploy/install.sh WHEEL VENV EXTRAS into a new venv; its wall seconds."""
    shutil.rmtree(venv, ignore_errors=True)
    env = clean_env(UV=str(UV), PYTHON="3.11", UV_CONSTRAINT=str(constraints))
    if cache is not None:
        env["UV_CACHE_DIR"] = str(cache)
    started = time.perf_counter()
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "install.sh"), str(wheel), str(venv), extras],
        env=env,
        cwd=venv.parent,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"install.sh {extras!r} failed: {done.stderr[-2000:]}")
    return round(seconds, 1)


def venv_facts(venv: Path) -> dict[str, Any]:
    size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True, check=True).stdout.split()[0]
    site = next((venv / "lib").glob("python3.*/site-packages"))
    return {"venv_mib": int(size), "distributions": len(list(site.glob("*.dist-info")))}


def no_change_sync_rss(venv: Path, data: Path) -> dict[str, Any]:
    """A full sync of a tiny platform from `venv`, then the measured no-change sync (the child's own peak RSS)."""
    with local_stack(data, scale="tiny") as stack:
        stack.advance(hours=48)
        env = clean_env(**stack.run_env())
        full = run_measured([str(venv / "bin" / "lessonsync"), "sync"], env)
        if full.returncode != 0:
            raise SystemExit(f"full sync from {venv} failed: {full.stderr_tail}")
        again = run_measured([str(venv / "bin" / "lessonsync"), "sync"], env)
        if again.returncode != 0:
            raise SystemExit(f"no-change sync from {venv} failed: {again.stderr_tail}")
    return {"no_change_sync_peak_rss_mib": again.peak_rss_mib, "no_change_sync_seconds": again.seconds}


def measure(name: str, extras: str, wheel: Path, constraints: Path, work: Path, cold: bool) -> dict[str, Any]:
    home = work / name.replace("+", "_")  # a data directory with '+' in its path breaks the Iceberg mirror
    venv = home / "venv"
    venv.parent.mkdir(parents=True)
    row: dict[str, Any] = {"set": name, "extras": extras, "load_average_at_start": load_average()}
    if cold:
        cache = home / "empty-cache"
        row["install_cold_s"] = install(wheel, venv, extras, constraints, cache)
        shutil.rmtree(cache, ignore_errors=True)
    install(wheel, venv, extras, constraints)  # fills the cache with whatever it lacked
    row["install_warm_s"] = install(wheel, venv, extras, constraints)
    row |= venv_facts(venv)
    row |= no_change_sync_rss(venv, home / "data")
    row["load_average_at_end"] = load_average()
    shutil.rmtree(home, ignore_errors=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| extras | install, warm cache (s) | install, cold (s) | venv (MiB) | distributions | no-change sync peak RSS "
        "(MiB) | load average (start, end) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['set']} | {r['install_warm_s']} | {r.get('install_cold_s', '-')} | {r['venv_mib']} | "
            f"{r['distributions']} | {r['no_change_sync_peak_rss_mib']} | "
            f"{r['load_average_at_start'][0]}, {r['load_average_at_end'][0]} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=EXTRAS", help="a set to measure (default: the five)"
    )
    parser.add_argument("--cold", action="store_true", help="also install from an empty uv cache (downloads)")
    args = parser.parse_args()
    sets = dict(s.split("=", 1) for s in args.set) or SETS
    work = Path(tempfile.mkdtemp(prefix="install-bench-"))
    try:
        wheel = build_wheel(work / "dist")
        constraints = dev_versions(work / "dev-versions.txt")
        rows = []
        for name, extras in sets.items():
            rows.append(measure(name, extras, wheel, constraints, work, args.cold))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}, indent=2))
    print(table(rows))


if __name__ == "__main__":
    main()
