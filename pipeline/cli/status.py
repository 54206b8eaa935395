"""`lessonsync status` and `lessonsync reset`: see and move the sync state of each stream.

    lessonsync status                                  # per stream: cursor, last load, quarantine, freshness
    lessonsync reset active_lessons --to 2026-01-31T00:00:00Z   # the next sync re-reads from there
    lessonsync reset answers                           # the next sync re-reads answers from the beginning

`status` reads only the lake's manifests, so it works while a sync runs. `reset` takes the warehouse's
write lock like a sync and is recorded in the lake, so `lessonsync rebuild` agrees with it.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from pipeline.settings import Settings, load_settings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--data-dir", type=Path, default=None, help="overrides LESSONSYNC_DATA_DIR")
    if parser.prog.endswith("reset"):
        parser.add_argument("stream", help="a stream with a cursor: active_lessons or answers")
        parser.add_argument("--to", type=_instant, default=None, metavar="TIMESTAMP",
                            help="ISO 8601 with offset; the cursor moves back to it (default: the beginning)")


def run(args: argparse.Namespace) -> int:
    settings = load_settings(**({"data_dir": args.data_dir} if args.data_dir is not None else {}))
    if hasattr(args, "stream"):
        return _reset(settings, args.stream, args.to)
    return _status(settings)


def _status(settings: Settings) -> int:
    from pipeline.warehouse.status import stream_statuses

    now = datetime.now(UTC)
    statuses = stream_statuses(settings.lake_location)
    if not statuses:
        print(f"no committed load in {settings.lake_location}: run `lessonsync sync` first")
        return 0
    print(f"{'stream':16} {'cursor':26} {'last load':26} {'rows':>9} {'quarantined':>11}  freshness  run")
    for s in statuses:
        age = now - s.last_load_at if s.last_load_at else None
        fresh = "never" if age is None else ("fresh" if age <= settings.freshness else "STALE")
        hours = f"{fresh} ({age.total_seconds() / 3600:.1f} h)" if age is not None else fresh
        print(f"{s.stream:16} {_when(s.cursor):26} {_when(s.last_load_at):26} {s.last_rows:>9,} "
              f"{s.quarantined:>11,}  {hours:10} {s.last_run_id or '-'}")
        if s.last_reset_at is not None:
            print(f"{'':16} cursor reset at {_when(s.last_reset_at)}")
    return 0


def _reset(settings: Settings, stream: str, to: datetime | None) -> int:
    from pipeline.warehouse import Warehouse, WarehouseError
    from pipeline.warehouse.reset import reset_cursor

    try:
        result = reset_cursor(Warehouse.from_settings(settings), stream, to)
    except WarehouseError as error:
        print(f"lessonsync reset: {error}", file=sys.stderr)
        return 1
    print(f"{stream}: cursor moved back from {_when(result.cursor_before)} to {_when(result.cursor_after)} "
          f"(load {result.seq}, recorded in the lake); the next sync re-reads from there")
    return 0


def _when(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else "-"


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 timestamp") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no UTC offset; add Z or +00:00")
    return value
