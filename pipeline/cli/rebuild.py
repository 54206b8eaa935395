"""`lessonsync rebuild`: rebuild every warehouse table (certificates included) from the Parquet lake alone.

lessonsync rebuild                            # the warehouse, rebuilt in place (atomic swap; the old file
                                              # is kept as warehouse.duckdb.before-rebuild)
lessonsync rebuild --into /tmp/check.duckdb   # build a separate file, leave the warehouse alone"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.cli.options import add_data_dir, settings_from

if TYPE_CHECKING:
    from pipeline.warehouse import RebuildReport


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the lake, the inbox and the warehouse are")
    parser.add_argument(
        "--into",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the rebuilt warehouse to this new file instead of replacing the warehouse",
    )
    parser.add_argument(
        "--no-backup", action="store_true", help="in place: do not keep the old file as warehouse.duckdb.before-rebuild"
    )


def run(args: argparse.Namespace) -> int:
    # DuckDB and the warehouse are imported when the command runs, so that its --help answers at once.
    from pipeline.warehouse import Warehouse, WarehouseError, rebuild_in_place, rebuild_into

    settings = settings_from(args)
    warehouse = Warehouse.from_settings(settings)
    try:
        if args.into is not None:
            report = rebuild_into(warehouse.lake, args.into, warehouse.connection_settings)
        else:
            report = rebuild_in_place(
                warehouse.path, warehouse.lake, warehouse.connection_settings, backup=not args.no_backup
            )
    except WarehouseError as error:
        print(f"lessonsync rebuild: {error}", file=sys.stderr)
        return 1
    print(summary(report))
    return 0


def summary(report: RebuildReport) -> str:
    lines = [f"rebuilt {report.target} from {report.loads} committed loads in {report.seconds:.1f} s"]
    lines += [f"  lms.{table}: {rows} rows" for table, rows in sorted(report.rows.items())]
    if report.backup is not None:
        lines.append(f"previous warehouse kept as {report.backup} (delete it once you are satisfied)")
    return "\n".join(lines)
