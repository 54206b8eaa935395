"""What a sync costs with its lake and Iceberg tables on object storage (not a test): moto's S3 server in a process
of its own on loopback (tests/remote/remote_servers.py), a local stack (pipeline/stack.py) whose lake is a fresh
bucket there, the Iceberg catalog in SQLite beside the warehouse; a full sync, then at once a no-change sync, then
after 24 simulated hours (~1% of active lessons change) a 1%-change sync, each `stack.sync()` in this process. Per
run: its seconds, the requests the S3 server answered (by kind, from its access log), and whether the warehouse
then equals the platform.

    .venv/bin/python -m bench.s3_bench                  # scale tiny
    .venv/bin/python -m bench.s3_bench --scale small

Results go to bench/results/s3_<scale>.json; the summary is printed.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import load_average

RESULTS = Path(__file__).resolve().parent / "results"
RUN_KINDS = ("full", "no_change", "one_percent")
ACCESS_LINE = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) ([^" ]*)[^"]*" \d{3}')  # werkzeug's access log, a line a request


def requests_in(log: Path) -> Counter[str]:
    """The requests in the server's log by kind: LIST (a GET of a listing), or the method."""
    kinds: Counter[str] = Counter()
    for match in map(ACCESS_LINE.search, log.read_text().splitlines()):
        if match:
            method, target = match.groups()
            kinds["LIST" if method == "GET" and "list-type=" in target else method] += 1
    return kinds


def measure(scale: str, work: Path) -> dict[str, Any]:
    import duckdb

    from pipeline.stack import environment, local_stack
    from pipeline.verify import compare_warehouse

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "remote"))
    from remote_servers import s3_server  # moto's server on loopback, as the suite starts it

    log = work / "moto.log"
    result: dict[str, Any] = {
        "scale": scale,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_average_at_start": load_average(),
        "runs": {},
    }
    with s3_server(log) as server:
        bucket = "lake-" + secrets.token_hex(4)
        server.create_bucket(bucket)
        env = {**server.env(), "LESSONSYNC_LAKE_URL": f"s3://{bucket}/lessonsync", "LESSONSYNC_TABLE_FORMAT": "iceberg"}
        with environment(env), local_stack(work / "data", scale=scale) as stack:
            stack.env.update(env)
            for kind in RUN_KINDS:
                if kind == "one_percent":
                    stack.advance(hours=24)
                before = requests_in(log)
                began = time.perf_counter()
                report = stack.sync()
                seconds = round(time.perf_counter() - began, 2)
                by_method = dict(requests_in(log) - before)
                with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
                    exact = all(diff.equal for diff in compare_warehouse(conn, stack.sim))
                run = {"success": report.success, "seconds": seconds, "requests": by_method, "exact": exact}
                if not report.success:
                    run["error"] = report.error
                result["runs"][kind] = run
                print(
                    f"[{scale}] {kind}: {seconds} s, {sum(by_method.values())} requests {by_method}, exact {exact}",
                    file=sys.stderr,
                    flush=True,
                )
    result["load_average_at_end"] = load_average()
    return result


def summary(result: dict[str, Any]) -> str:
    lines = [
        f"A sync with its lake and Iceberg tables on S3 (moto), scale {result['scale']}; load average "
        f"{result['load_average_at_start'][0]} at the start, {result['load_average_at_end'][0]} at the end",
        "| run | seconds | requests | by kind | exact |",
        "|---|---|---|---|---|",
    ]
    for kind, run in result["runs"].items():
        methods = ", ".join(f"{method} {count}" for method, count in sorted(run["requests"].items()))
        lines.append(f"| {kind} | {run['seconds']} | {sum(run['requests'].values())} | {methods} | {run['exact']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="tiny", choices=("tiny", "small", "medium"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="s3_bench_") as temp:
        result = measure(args.scale, Path(temp))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"s3_{args.scale}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    print(f"results: {out}", file=sys.stderr)
    return 0 if all(run["success"] and run["exact"] for run in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
