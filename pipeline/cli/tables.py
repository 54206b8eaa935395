"""The lake's Iceberg tables (LESSONSYNC_TABLE_FORMAT=iceberg, the default): what they hold, and their upkeep.

    lessonsync tables show       # each table: rows, data files, snapshots, the load it mirrors
    lessonsync tables sync       # bring every table up to the warehouse (after a failure; syncs do this anyway)
    lessonsync tables maintain   # expire snapshots past LESSONSYNC_ICEBERG_SNAPSHOT_RETENTION, compact small files

Each takes the warehouse's write lock like a sync, so it never races a load."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.options import add_data_dir, settings_from


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the warehouse and lake are")
    parser.add_argument("action", choices=("show", "sync", "maintain"))


def run(args: argparse.Namespace) -> int:
    from pipeline.warehouse import TableFormatError, Warehouse, WarehouseError, maintain, table_summaries

    settings = settings_from(args)
    warehouse = Warehouse.from_settings(settings)
    mirror = warehouse.table_mirror
    if mirror is None:
        print("lessonsync tables: LESSONSYNC_TABLE_FORMAT=none: no Iceberg tables are kept", file=sys.stderr)
        return 1
    try:
        if args.action == "show":
            for summary in table_summaries(mirror):
                print(summary)
            return 0
        with warehouse.connect() as conn:
            if args.action == "sync":
                from pipeline.analytics.models import load_project
                from pipeline.defs.analytics.assets import mart_relations

                written = mirror.sync_raw(conn) + mirror.sync_marts(
                    conn, mart_relations(load_project(settings.models_dir))
                )
                changed = [s for s in written if s.wrote]
                print(
                    f"{len(written)} tables checked, {len(changed)} written: {', '.join(s.table for s in changed) or '-'}"
                )
            else:
                report = maintain(mirror, conn, settings.iceberg_snapshot_retention)
                print(report.summary())
    except (WarehouseError, TableFormatError) as error:
        print(f"lessonsync tables {args.action}: {error}", file=sys.stderr)
        return 1
    return 0
