"""`lessonsync sync`: the nightly sync, in-process, for cron users without the Dagster daemon."""

from __future__ import annotations

import argparse
import os
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full-refresh", action="store_true", help="ignore cursors and re-read every stream")
    parser.add_argument("--select", action="append", default=[], metavar="SELECTION",
                        help="Dagster asset selection, e.g. 'group:progress' or 'key:lms/answers' (repeatable)")
    parser.add_argument("--data-dir", help="overrides LESSONSYNC_DATA_DIR")
    parser.add_argument("--base-url", help="overrides LESSONSYNC_BASE_URL")


def run(args: argparse.Namespace) -> int:
    if args.data_dir:
        os.environ["LESSONSYNC_DATA_DIR"] = args.data_dir
    if args.base_url:
        os.environ["LESSONSYNC_BASE_URL"] = args.base_url
    from pipeline.instance import ensure_dagster_home, print_source_logs_once
    from pipeline.sync import run_sync

    started = time.monotonic()
    try:
        select = _whole_multi_assets(args.select)
    except ValueError as exc:
        print(f"lessonsync sync: {exc}")
        return 2
    data_dir = Path(os.environ.get("LESSONSYNC_DATA_DIR", "data"))
    print_source_logs_once(ensure_dagster_home(data_dir))
    report = run_sync(full_refresh=args.full_refresh, select=select, data_dir=data_dir)
    for line in summary_lines(report.materializations):
        print(line)
    for check in report.failed_checks:
        print(f"check failed: {check}")
    outcome = "succeeded" if report.success else f"FAILED: {report.error}"
    print(f"sync {outcome} in {time.monotonic() - started:.1f} s (run {report.run_id})")
    return 0 if report.success else 1


def _whole_multi_assets(select: list[str]) -> list[str]:
    """The selection widened to the assets fetched together with a selected one, said on the console."""
    if not select:
        return select
    from pipeline.definitions import build_definitions
    from pipeline.defs.selection import widen_to_whole_multi_assets
    from pipeline.settings import load_settings

    widened = widen_to_whole_multi_assets(build_definitions(load_settings()), select)
    for key, neighbours in widened.added.items():
        print(f"selection widened: {key} is fetched together with {', '.join(neighbours)}, which run with it")
    return widened.select


def summary_lines(materializations: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One line per asset that loads rows (synced tables, certificates), then the models' build in a few lines."""
    lines, models = [], []
    for key, metadata in sorted(materializations.items()):
        fetched = metadata.get("rows_fetched", metadata.get("events_loaded"))
        if fetched is None:  # not a load: an analytics model
            models.append(f"{key.split('/')[-1]} {metadata.get('dagster/row_count', 0):,}")
            continue
        lines.append(f"{key:32} fetched {fetched!s:>10}  inserted {metadata.get('rows_inserted', '-')!s:>9}  "
                     f"updated {metadata.get('rows_updated', '-')!s:>9}  deleted {metadata.get('rows_deleted', '-')!s:>7}"
                     f"  rows now {metadata.get('dagster/row_count', '-')!s:>10}")
    if models:
        lines += textwrap.wrap(f"models built: {len(models)} (rows) " + ", ".join(models), width=110,
                               subsequent_indent="  ")
    return lines
