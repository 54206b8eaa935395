"""Peak memory per run kind per scale (the aim: every run kind at every scale up to large under 600 MiB), not a
test: `bench/sync_bench.py` (full, no-change and 1%-change syncs of the raw tables on one data dir) at each scale,
then one table and one plot of their peaks. Writes the generated section of docs/BENCHMARKS.md between
`<!-- memory:start -->` and `<!-- memory:end -->` and docs/benchmark_memory.png.

Three peaks per run: the sync process's own (the kernel's, os.wait4), and its process tree's sampled every 0.2 s
(the answers' decode worker is a process of its own) as an RSS sum and as a PSS sum (library pages the worker
shares with the sync process counted once).

    .venv/bin/python -m bench.memory_by_scale                  # tiny, small, medium, large: ~10 min
    .venv/bin/python -m bench.memory_by_scale --reuse          # scales with bench/results/sync_<scale>.json kept
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import DOC, write_doc_section
from bench.sync_bench import RESULTS, RUN_KINDS

ROOT = Path(__file__).resolve().parent.parent
PLOT = ROOT / "docs" / "benchmark_memory.png"
SCALES = ("tiny", "small", "medium", "large")
SELECTION = "key_lms_all"  # sync_bench's default selection: every raw table (key:lms/*)
TARGET_MIB = 600
START, END = "<!-- memory:start -->", "<!-- memory:end -->"


def results_of(scale: str) -> dict[str, Any] | None:
    path = RESULTS / f"sync_{scale}.json"
    return json.loads(path.read_text()) if path.exists() else None


def peaks(scale: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    runs = result["selections"][SELECTION]
    answers = result["counts"].get("answers")
    rows = []
    for kind in RUN_KINDS:
        run = runs.get(kind, {})
        if "error" in run or not run:
            rows.append({"scale": scale, "kind": kind, "answers": answers, "error": run.get("error", "not run")})
            continue
        rows.append(
            {
                "scale": scale,
                "kind": kind,
                "answers": answers,
                "seconds": run["run_seconds"],
                "process": run["peak_rss_mib"],
                "tree_rss": run.get("peak_tree_rss_mib"),
                "tree_pss": run.get("peak_tree_pss_mib"),
                "date": result["date"],
                "load": [
                    round(result["load_average_at_start"][0], 2),
                    round(result.get("load_average_now", [0])[0], 2),
                ],
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| scale (answers) | run | wall s | peak MiB: sync process | process tree RSS | process tree PSS | "
        "taken (load average start, end) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(
                f"| {row['scale']} ({row['answers']:,}) | {row['kind']} | FAILED: "
                f"{str(row['error']).splitlines()[-1][:100]} | | | | |"
            )
            continue
        over = [name for name in ("process", "tree_rss", "tree_pss") if (row[name] or 0) > TARGET_MIB]
        cells = [f"**{row[n]}**" if n in over else str(row[n]) for n in ("process", "tree_rss", "tree_pss")]
        lines.append(
            f"| {row['scale']} ({row['answers']:,}) | {row['kind']} | {row['seconds']} | "
            f"{' | '.join(cells)} | {row['date']} ({row['load'][0]}, {row['load'][1]}) |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.6))
    colors = {"full": "tab:blue", "no_change": "tab:green", "one_percent": "tab:orange"}
    for kind in RUN_KINDS:
        runs = [r for r in rows if r["kind"] == kind and "error" not in r]
        if not runs:
            continue
        answers = [r["answers"] for r in runs]
        ax.plot(answers, [r["process"] for r in runs], "o-", color=colors[kind], label=f"{kind}: sync process")
        ax.plot(
            answers,
            [r["tree_rss"] for r in runs],
            "s--",
            color=colors[kind],
            alpha=0.6,
            label=f"{kind}: process tree (RSS sum)",
        )
    ax.axhline(TARGET_MIB, color="red", linewidth=1, linestyle=":", label=f"target {TARGET_MIB} MiB")
    shown = sorted({(r["answers"], r["scale"]) for r in rows})
    ax.set_xscale("log")
    ax.set_xticks([a for a, _ in shown], [f"{s}\n{a:,}" for a, s in shown], fontsize=8)
    ax.minorticks_off()
    ax.set_ylim(0, max(TARGET_MIB, *(r.get("tree_rss") or 0 for r in rows)) * 1.15)
    ax.set_xlabel("scale (answers, log)")
    ax.set_ylabel("peak MiB")
    ax.set_title("Peak memory of a sync by run kind and scale (bench/memory_by_scale.py)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def section(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        [
            START,
            "",
            "## Peak memory per run kind and scale: `python -m bench.memory_by_scale`",
            "",
            "_Generated by `bench/memory_by_scale.py` from `bench/results/sync_<scale>.json` (bench/sync_bench.py: "
            "every raw table, checks included, no marts); regenerating replaces only this section._ "
            f"Bold: above the {TARGET_MIB} MiB target. The sync process's peak is the kernel's; the process tree's "
            "(with the answers' decode worker, a process of its own at medium and large) is sampled every 0.2 s, as "
            "an RSS sum and as a PSS sum (the ~52 MiB of library pages the worker shares with the sync process "
            "counted once).",
            "",
            markdown(rows),
            "",
            "![peak memory by run kind and scale](benchmark_memory.png)",
            "",
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default=",".join(SCALES))
    parser.add_argument("--reuse", action="store_true", help="keep a scale's existing sync_bench results")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/BENCHMARKS.md or the plot")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for scale in args.scales.split(","):
        if not (args.reuse and results_of(scale)):
            print(f"=== sync_bench --scale {scale}", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "bench.sync_bench", "--scale", scale, "--no-docs"], check=False)
        result = results_of(scale)
        if result is None:
            print(f"{scale}: no results", file=sys.stderr)
            continue
        rows += peaks(scale, result)
    print(markdown(rows))
    if not args.no_docs and rows:
        write_doc_section(DOC, START, END, section(rows))
        plot(rows)
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
