"""`make bench` (`python -m bench`): every benchmark in turn, at BENCH_SCALE (default large), each in its own
process; results in bench/results/, summary figures in docs/BENCHMARKS.md. Not part of `make test`."""

from __future__ import annotations

import os
import subprocess
import sys

SCALED = ("bench.simulator_bench", "bench.client_bench", "bench.sync_bench", "bench.analytics_bench")
UNSCALED = ("bench.upsert_options", "bench.webhook_bench")


def main() -> int:
    scale = os.environ.get("BENCH_SCALE", "large")
    runs = [[module, "--scale", scale] for module in SCALED] + [[module] for module in UNSCALED]
    failed = []
    for module, *args in runs:
        print(f"\n=== {module} {' '.join(args)}", flush=True)
        if subprocess.run([sys.executable, "-m", module, *args]).returncode != 0:
            failed.append(module)
    print("\nbenchmarks done" + (f"; FAILED: {', '.join(failed)}" if failed else "; results in bench/results/"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
