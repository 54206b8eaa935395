"""Move one stream's cursor back, never forward: the next sync re-reads the stream from there.

    lessonsync reset active_lessons --to 2026-01-31T00:00:00Z   # the next sync re-reads from that instant
    lessonsync reset answers                                    # the next sync re-reads answers from the start

It takes the warehouse's write lock like a sync and is recorded in the lake as a load of its own, so
`lessonsync rebuild` agrees with it."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from pipeline.cli.options import add_data_dir, settings_from
from pipeline.cli.status import when


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the warehouse and lake are")
    parser.add_argument("stream", help="a stream with a cursor: active_lessons or answers")
    parser.add_argument(
        "--to",
        type=_instant,
        default=None,
        metavar="TIMESTAMP",
        help="ISO 8601 with offset; the cursor moves back to it (default: the beginning)",
    )


def run(args: argparse.Namespace) -> int:
    # The warehouse (DuckDB) is imported when the command runs, so that its --help answers at once.
    from pipeline.warehouse import Warehouse, WarehouseError, reset_cursor

    try:
        result = reset_cursor(Warehouse.from_settings(settings_from(args)), args.stream, args.to)
    except WarehouseError as error:
        print(f"lessonsync reset: {error}", file=sys.stderr)
        return 1
    print(
        f"{args.stream}: cursor moved back from {when(result.cursor_before)} to {when(result.cursor_after)} "
        f"(load {result.seq}, recorded in the lake); the next sync re-reads from there"
    )
    return 0


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 timestamp") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset; add Z or +00:00")
    return value
