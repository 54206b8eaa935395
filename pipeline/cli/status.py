"""Show, per stream, the cursor, the last committed load (when, rows, run), the records held in quarantine and
whether the data is fresh (LESSONSYNC_FRESHNESS_HOURS).

    lessonsync status

It reads only the lake's load manifests, so it answers while a sync holds the warehouse."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.cli.inbox import inbox_quarantine_line
from pipeline.cli.options import add_data_dir, settings_from

if TYPE_CHECKING:
    from pipeline.settings import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the lake is, unless LESSONSYNC_LAKE_URL puts it in a bucket")


def run(args: argparse.Namespace) -> int:
    return _status(settings_from(args))


def _status(settings: Settings) -> int:
    from pipeline.warehouse.status import stream_statuses  # reads the lake: imported when the command runs

    now = datetime.now(UTC)
    statuses = stream_statuses(settings.lake_location)
    if (inbox_line := inbox_quarantine_line(settings)) is not None:
        print(inbox_line)
    if not statuses:
        print(f"no committed load in {settings.lake_location}: run `lessonsync sync` first")
        return 0
    print(f"{'stream':16} {'cursor':26} {'last load':26} {'rows':>9} {'quarantined':>11}  freshness  run")
    for s in statuses:
        age = now - s.last_load_at if s.last_load_at else None
        fresh = "never" if age is None else ("fresh" if age <= settings.freshness else "STALE")
        hours = f"{fresh} ({age.total_seconds() / 3600:.1f} h)" if age is not None else fresh
        where = when(s.cursor) if s.position is None else f"inbox sequence {s.position}"
        print(
            f"{s.stream:16} {where:26} {when(s.last_load_at):26} {s.last_rows:>9,} "
            f"{s.quarantined:>11,}  {hours:10} {s.last_run_id or '-'}"
        )
        if s.last_reset_at is not None:
            print(f"{'':16} cursor reset at {when(s.last_reset_at)}")
    return 0


def when(value: datetime | None) -> str:
    """An instant as the status and reset lines show it: UTC, to the second; '-' when there is none."""
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else "-"
