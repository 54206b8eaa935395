"""`make bench` (`python -m bench`): every benchmark in turn, at BENCH_SCALE (default large), each in its own
process; a benchmark that fails is reported and the others still run. Results in bench/results/, summary
figures in docs/BENCHMARKS.md (compare_bench regenerates its own section there and docs/benchmark_scaling.png).
BENCH_REPEAT sets the rounds of the side-by-side comparison. Not part of `make test`."""

from __future__ import annotations

import os
import subprocess
import sys

SCALED = (
    "bench.simulator_bench",
    "bench.client_bench",
    "bench.sync_bench",
    "bench.analytics_bench",
    "bench.compare_bench",
)  # compare_bench: side by side with dlt and the ceiling, then scaling
# latency_bench: its own configuration (scale medium, 40 ms a request), LessonSync beside the ceiling; start_bench:
# the whole `lessonsync sync` command at scale small (its first request, the no-change and 1%-change ratios)
UNSCALED = ("bench.upsert_options", "bench.webhook_bench", "bench.latency_bench", "bench.start_bench")
# the nightly runs (no-change, 1%-change) as over a network: latency_bench's configuration, each beside its floor
LATENCY_BOUND = [["bench.sync_bench", "--scale", "medium", "--latency-ms", "40", "--page-size", "100"]]


def main() -> int:
    scale = os.environ.get("BENCH_SCALE", "large")
    runs = [[module, "--scale", scale] for module in SCALED] + [[module] for module in UNSCALED] + LATENCY_BOUND
    # peak memory per run kind at every scale: the other scales' sync_bench runs, BENCH_SCALE's reused
    runs.append(["bench.memory_by_scale", "--reuse"])
    if os.environ.get("BENCH_REPEAT"):  # rounds of the side-by-side comparison (default 3)
        runs[SCALED.index("bench.compare_bench")] += ["--repeat", os.environ["BENCH_REPEAT"]]
    failed = []
    for module, *args in runs:
        print(f"\n=== {module} {' '.join(args)}", flush=True)
        try:
            if subprocess.run([sys.executable, "-m", module, *args]).returncode != 0:
                failed.append(module)
        except OSError as exc:  # one benchmark failing never stops the others
            print(f"{module}: {type(exc).__name__}: {exc}", flush=True)
            failed.append(module)
    print("\nbenchmarks done" + (f"; FAILED: {', '.join(failed)}" if failed else "; results in bench/results/"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
