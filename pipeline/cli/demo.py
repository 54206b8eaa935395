"""Show the whole path on loopback, in one process (`make demo`): a simulated platform and the webhook
receiver start; a full sync loads everything; the platform's clock moves a day (progress, new attempts, new
users and sessions, certificates completed and expired, delivered by webhook); an incremental sync catches
up; both are verified against the simulator's ground truth; then a summary and a few marts. Everything lands
in <data dir>/demo/ (recreated each time); the runs are recorded in the persistent Dagster home, so the
Dagster UI (`make dev`) shows them."""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.options import DEFAULT_DATA_DIR_TEXT, bounded_int, settings_from
from pipeline.logs import without_class_path

# Dagster, DuckDB and the simulator are imported inside the functions that use them, so that
# `lessonsync demo --help` answers at once.
if TYPE_CHECKING:
    from dagster import DagsterInstance
    from duckdb import DuckDBPyConnection

    from pipeline.stack import Stack
    from pipeline.sync import SyncReport

DEMO_SUBDIRECTORY = "demo"  # of the data directory: the demo never touches the warehouse of real syncs


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument(
        "--scale",
        default="small",
        choices=["tiny", "small", "medium", "large"],
        help="size of the simulated platform (default small, about 20k active lessons)",
    )
    # the simulator's generators take 32 bits of the seed: a larger one would repeat a smaller one's data
    parser.add_argument(
        "--seed", type=bounded_int(0, 2**32 - 1), default=42, help="same seed, same data (default 42; 0 to 2^32-1)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        dest="demo_dir",
        help=f"recreated at every demo (default: <LESSONSYNC_DATA_DIR>/{DEMO_SUBDIRECTORY}, "
        f"else {DEFAULT_DATA_DIR_TEXT}/{DEMO_SUBDIRECTORY})",
    )


def run(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from pipeline.instance import ensure_dagster_home
    from pipeline.stack import local_stack

    settings = settings_from(args)  # the persistent Dagster home is the one of real syncs
    data_dir: Path = args.demo_dir or settings.data_dir / DEMO_SUBDIRECTORY
    if data_dir.exists():
        shutil.rmtree(data_dir)
    ensure_dagster_home(settings)
    instance = DagsterInstance.get()
    with local_stack(data_dir, seed=args.seed, scale=args.scale) as stack:
        counts = stack.sim.world.counts()
        print(
            f"\nSimulator at {stack.sim.base_url}, scale {args.scale}, seed {args.seed}: "
            + ", ".join(f"{n:,} {name.replace('_', ' ')}" for name, n in counts.items())
        )
        full, full_s = _timed_sync(stack, instance, "Full sync")
        exact_full = _verify(stack)
        activity = stack.advance(hours=24)
        print("\nOne simulated day later: " + ", ".join(f"{n:,} {k.replace('_', ' ')}" for k, n in activity.items()))
        incremental, incremental_s = _timed_sync(stack, instance, "Incremental sync")
        exact_incremental = _verify(stack)
        _summary(stack, incremental, full_s, incremental_s)
        _marts(stack)
    ok = full.success and incremental.success and exact_full and exact_incremental
    print(
        f"\nDemo {'finished' if ok else 'FAILED'}: warehouse {stack.warehouse_path}, "
        f"analytics {data_dir / 'analytics.duckdb'}, marts {data_dir / 'marts'}/"
    )
    return 0 if ok else 1


def _timed_sync(stack: Stack, instance: DagsterInstance, label: str) -> tuple[SyncReport, float]:
    from pipeline.cli.progress import live_progress

    print(f"\n{label} ...", flush=True)
    started = time.monotonic()
    with live_progress():  # a live line per stream on a terminal (pipeline/cli/progress.py)
        report = stack.sync(instance=instance)
    seconds = time.monotonic() - started
    status = "ok" if report.success else f"FAILED: {without_class_path(report.error or 'the run failed')}"
    print(f"{label}: {status} in {seconds:.1f} s (Dagster run {report.run_id})")
    for check in report.failed_checks:
        print(f"  check failed: {check}")
    return report, seconds


def _verify(stack: Stack) -> bool:
    import duckdb

    from pipeline.verify import compare_warehouse

    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        diffs = compare_warehouse(conn, stack.sim)
    unequal = [d for d in diffs if not d.equal]
    rows = sum(d.actual_rows for d in diffs)
    print(
        f"Warehouse vs platform ground truth: {'EQUAL' if not unequal else 'DIFFERENT'} "
        f"({len(diffs)} tables, {rows:,} rows compared field by field)"
    )
    for diff in unequal:
        print("  " + diff.summary())
    return not unequal


def _summary(stack: Stack, incremental: SyncReport, full_s: float, incremental_s: float) -> None:
    import duckdb

    from pipeline.console import text_table
    from pipeline.contract.streams import stream_tables
    from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES
    from pipeline.webhooks import certificate_summary

    rows: list[tuple[object, ...]] = []
    with duckdb.connect(str(stack.warehouse_path)) as conn:  # no sync is running now
        for table in (*stream_tables(), CERTIFICATE_EVENTS.name, CERTIFICATES.name):
            live = "WHERE deleted_at IS NULL" if _has_column(conn, table, "deleted_at") else ""
            total = conn.execute(f"SELECT count(*) FROM lms.{table} {live}").fetchall()[0][0]
            changed = incremental.materializations.get(f"lms/{table}", {})
            rows.append(
                (
                    f"lms.{table}",
                    total,
                    changed.get("rows_inserted", changed.get("events_loaded", 0)),
                    changed.get("rows_updated", changed.get("certificates_changed", 0)),
                    changed.get("rows_deleted", 0),
                )
            )
        certificates = certificate_summary(conn)
    print("\nTables after the incremental sync (inserted/updated/deleted: what the incremental run changed)")
    print(text_table(("table", "rows", "inserted", "updated", "deleted"), rows))
    print(
        f"\nTime: full sync {full_s:.1f} s, incremental {incremental_s:.1f} s "
        f"({100 * incremental_s / full_s:.0f}% of the full sync, Dagster overhead included)"
    )
    print("Certificates: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(certificates.items())))


def _marts(stack: Stack) -> None:
    from pipeline.analytics import mart_summary

    print(f"\nA few marts, from the published {stack.data_dir / 'analytics.duckdb'}")
    print(mart_summary(stack.data_dir))


def _has_column(conn: DuckDBPyConnection, table: str, column: str) -> bool:
    return bool(
        conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'lms' AND "
            "table_name = ? AND column_name = ?",
            [table, column],
        ).fetchall()[0][0]
    )
