"""Which records a run asks for and how far its cursor may move afterwards.

Two ways to run the incremental streams:
- cursor runs (nightly schedule, `lessonsync sync`): since = cursor - lookback, nothing dropped, and the
  cursor advances to the server's run start minus a safety margin once the sweep was complete;
- backfills (a date range set in the Launchpad, pipeline/backfill.py): since = range start, one sweep, and every
  row fetched is kept, those updated after the range end too (they are current data, the same the next cursor
  run would write); the range end only bounds which answer versions are recorded. The cursor is left alone (a
  backfill never moves it backwards or past the nightly run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Window:
    since: datetime | None  # sent as updatedSince; None = everything
    until: datetime | None  # a backfill's range end: rows updated later are kept; None = no range end
    moves_cursor: bool
    label: str  # for logs and metadata

    def describe(self) -> str:
        """What the run kept: every row listed, i.e. updated since `since`, whatever the range end."""
        kept = f"{self.label}: rows updated since {self.since.isoformat()}" if self.since else f"{self.label}: every row"
        if self.until is None:
            return kept
        return f"{kept} (range end {self.until.isoformat()}: rows updated later kept too)"


def cursor_window(cursor: datetime | None, lookback: timedelta, full_refresh: bool = False) -> Window:
    if full_refresh or cursor is None:
        return Window(since=None, until=None, moves_cursor=True, label="full")
    return Window(since=cursor - lookback, until=None, moves_cursor=True, label="incremental")


def partition_window(start: datetime, end: datetime) -> Window:
    return Window(since=start, until=end, moves_cursor=False, label="backfill")


def next_cursor(
    window: Window,
    previous: datetime | None,
    server_run_start: datetime,
    safety_margin: timedelta,
    complete: bool,
) -> datetime | None:
    """The cursor to commit with this run's rows.

    Everything updated before the server's run start was listed by a complete sweep, so the cursor may
    move there (less a margin for records the platform commits late). Records updated while the run paged
    are newer than that and fall in the next window. An incomplete sweep (drift that did not settle) keeps
    the previous cursor, so the next run reads the same window again.
    """
    if not window.moves_cursor or not complete:
        return previous
    candidate = server_run_start - safety_margin
    if previous is not None and previous >= candidate:
        return previous  # never backwards, e.g. a cursor in the future stays where it is
    return candidate
