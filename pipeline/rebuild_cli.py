"""`lessonsync rebuild`: rebuild every warehouse table from the Parquet lake alone (and the certificate
tables from the webhook inbox, their own durable log).

    lessonsync rebuild                       # <data-dir>/warehouse.duckdb, rebuilt in place (atomic swap;
                                             # the old file is kept as warehouse.duckdb.before-rebuild)
    lessonsync rebuild --into /tmp/check.duckdb   # build a separate file, leave the warehouse alone
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import duckdb

from pipeline.settings import load_settings
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.load import load_certificate_events
from pipeline.warehouse import Warehouse, WarehouseError
from pipeline.warehouse.rebuild import RebuildReport, rebuild_in_place, rebuild_into

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="data directory holding lake/ and warehouse.duckdb (default: LESSONSYNC_DATA_DIR or data)")
    parser.add_argument("--into", type=Path, default=None,
                        help="write the rebuilt warehouse to this new file instead of replacing the warehouse")
    parser.add_argument("--no-backup", action="store_true",
                        help="in place: do not keep the old file as warehouse.duckdb.before-rebuild")


def run(args: argparse.Namespace) -> int:
    settings = load_settings(**({"data_dir": args.data_dir} if args.data_dir is not None else {}))
    warehouse = Warehouse.from_settings(settings)
    inbox = Inbox(settings.inbox_path)

    def replay_certificates(conn: duckdb.DuckDBPyConnection) -> None:
        # Certificates are not fetched, so not in the lake: the webhook inbox is their durable log.
        if inbox.inbox_id() is None:
            return  # no receiver ever stored a delivery here
        stats = load_certificate_events(conn, inbox)
        log.info("certificates: %s events replayed from the inbox %s", stats.events_loaded, inbox.path)

    try:
        if args.into is not None:
            report = rebuild_into(warehouse.lake, args.into, warehouse.connection_settings,
                                  also=replay_certificates)
        else:
            report = rebuild_in_place(warehouse.path, warehouse.lake, warehouse.connection_settings,
                                      backup=not args.no_backup, also=replay_certificates)
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
