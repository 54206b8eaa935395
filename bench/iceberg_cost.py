"""What the Iceberg mirror costs per run kind (not a test): against one simulator, a full sync, a no-change sync
and a 1%-change sync (24 simulated hours later), each with LESSONSYNC_TABLE_FORMAT=iceberg; per run the seconds
spent in the mirror (raw tables after each commit, marts after the publish), the bytes and data files it wrote
under <lake>/iceberg, and the run's wall time.

    .venv/bin/python -m bench.iceberg_cost --scale large
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

from pipeline.stack import local_stack
from pipeline.warehouse.lake import iceberg


def _tree(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    return sum(p.stat().st_size for p in files), len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    spent = {"raw": 0.0, "marts": 0.0}

    def timed(method, part: str):  # type: ignore[no-untyped-def]
        def run(self, *a, **k):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            try:
                return method(self, *a, **k)
            finally:
                spent[part] += time.perf_counter() - started

        return run

    iceberg.IcebergMirror.sync_behind = timed(iceberg.IcebergMirror.sync_behind, "raw")  # type: ignore[method-assign]
    iceberg.IcebergMirror.sync_marts = timed(iceberg.IcebergMirror.sync_marts, "marts")  # type: ignore[method-assign]
    data = Path(tempfile.mkdtemp(prefix="iceberg-cost-")) / "data"
    with local_stack(data, scale=args.scale) as stack:
        stack.env["LESSONSYNC_TABLE_FORMAT"] = "iceberg"
        for kind in ("full", "no_change", "one_percent"):
            if kind == "one_percent":
                stack.advance(hours=24)
            spent.update(raw=0.0, marts=0.0)
            bytes_before, files_before = _tree(data / "lake" / "iceberg")
            started = time.perf_counter()
            report = stack.sync()
            wall = time.perf_counter() - started
            bytes_after, files_after = _tree(data / "lake" / "iceberg")
            print(
                f"{args.scale} {kind:12} ok={report.success} wall {wall:6.1f} s  mirror raw {spent['raw']:6.2f} s "
                f"marts {spent['marts']:5.2f} s  wrote {(bytes_after - bytes_before) / 2**20:8.1f} MiB in "
                f"{files_after - files_before} files",
                flush=True,
            )


if __name__ == "__main__":
    main()
