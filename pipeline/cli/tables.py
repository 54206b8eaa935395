"""The lake's Iceberg tables (LESSONSYNC_TABLE_FORMAT=iceberg, the default): what they hold, and their upkeep.

    lessonsync tables show       # each table: rows, data files, snapshots, the load it mirrors
    lessonsync tables sync       # bring every table up to the warehouse now, repairing what is damaged
    lessonsync tables maintain   # repair, then compact small files and expire snapshots past
                                 # LESSONSYNC_ICEBERG_SNAPSHOT_RETENTION

Syncs mirror the tables anyway, in their own step, and heal the damage they meet (docs/lake-tables.md): `sync`
also checks every table the record vouches for, and every data file of each. Each takes the warehouse's write
lock like a sync, so it never races a load. Exit 1 when a table could not be brought up to the warehouse."""

from __future__ import annotations

import argparse
import sys

from pipeline.cli.options import add_data_dir, settings_from


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the warehouse and lake are")
    parser.add_argument("action", choices=("show", "sync", "maintain"))


def run(args: argparse.Namespace) -> int:
    from pipeline.analytics import load_project
    from pipeline.defs.analytics.assets import mart_relations
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
        marts = mart_relations(load_project(settings.models_dir))
        with warehouse.connect() as conn:
            if args.action == "sync":
                checked = mirror.sync_raw(conn, verify_files=True) + mirror.sync_marts(conn, marts, verify_files=True)
                for stats in checked:
                    if stats.repaired:
                        print(f"repaired {stats.table}: {stats.repaired}")
                changed = [s.table for s in checked if s.wrote]
                print(f"{len(checked)} tables checked, {len(changed)} written: {', '.join(changed) or '-'}")
                failed = [s.error for s in checked if s.error]
            else:
                report = maintain(mirror, conn, settings.iceberg_snapshot_retention, marts)
                print(report.summary())
                failed = list(report.failed.values())
    except (WarehouseError, TableFormatError) as error:
        print(f"lessonsync tables {args.action}: {error}; the warehouse is unchanged", file=sys.stderr)
        return 1
    finally:
        mirror.close()
    for problem in failed:
        print(f"lessonsync tables {args.action}: not brought up to the warehouse: {problem}", file=sys.stderr)
    return 1 if failed else 0
