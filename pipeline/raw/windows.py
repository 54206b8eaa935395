"""Which records a run asks for and how far its cursor may move afterwards.

Two ways to run the incremental streams:
- cursor runs (nightly schedule, `lessonsync sync`): since = cursor - lookback, nothing dropped, and the
  cursor advances once the sweep was complete (`next_cursor`, proved in docs/design.md);
- backfills (a date range set in the Launchpad, pipeline/defs/progress/backfill.py): since = range start, one sweep, and every
  row fetched is kept, those updated after the range end too (they are current data, the same the next cursor
  run would write); the range end only bounds which answer versions are recorded. The cursor is left alone (a
  backfill never moves it backwards or past the nightly run).

The cursor rule, C' = min(S - m, M - r), is safe whichever of the platform's clocks runs ahead; its proof and
the answers' cursor cap: docs/design.md, "The cursor rule".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pipeline.contract.streams import UPDATED_SINCE_RESOLUTION as RESOLUTION

UNBOUNDED = datetime.max.replace(tzinfo=UTC)  # no ceiling on a cursor


@dataclass(frozen=True)
class Window:
    since: datetime | None  # sent as updatedSince; None = everything
    until: datetime | None  # a backfill's range end: rows updated later are kept; None = no range end
    moves_cursor: bool
    label: str  # for logs and metadata

    def describe(self) -> str:
        """What the run kept: every row listed, i.e. updated since `since`, whatever the range end."""
        kept = (
            f"{self.label}: rows updated since {self.since.isoformat()}" if self.since else f"{self.label}: every row"
        )
        if self.until is None:
            return kept
        return f"{kept} (range end {self.until.isoformat()}: rows updated later kept too)"


# A snapshot stream is pulled whole every run and moves no cursor.
SNAPSHOT_WINDOW = Window(since=None, until=None, moves_cursor=False, label="snapshot")


def cursor_window(cursor: datetime | None, lookback: timedelta, full_refresh: bool = False) -> Window:
    if full_refresh or cursor is None:
        return Window(since=None, until=None, moves_cursor=True, label="full")
    return Window(since=cursor - lookback, until=None, moves_cursor=True, label="incremental")


def partition_window(start: datetime, end: datetime) -> Window:
    return Window(since=start, until=end, moves_cursor=False, label="backfill")


def next_cursor(
    window: Window,
    previous: datetime | None,
    *,
    server_run_start: datetime | None,
    newest_listed: datetime | None,
    safety_margin: timedelta,
    complete: bool,
    ceiling: datetime | None = UNBOUNDED,
) -> datetime | None:
    """The cursor to commit with this run's rows: min(server run start - margin, newest lastDate listed -
    RESOLUTION, ceiling), never backwards; unchanged for backfills, incomplete sweeps, windows that listed
    nothing and a ceiling of None (the cursor it follows does not exist yet); proof in the module
    docstring. `server_run_start` None: the data alone bounds it (pipeline/raw/commit.py passes our own clock when the
    platform sends no Date header: one more bound of the minimum, so never less safe)."""
    if not window.moves_cursor or not complete or newest_listed is None or ceiling is None:
        return previous
    candidate = min(newest_listed - RESOLUTION, ceiling)
    if server_run_start is not None:
        candidate = min(candidate, server_run_start - safety_margin)
    if previous is not None and previous >= candidate:
        return previous  # never backwards, e.g. a cursor in the future stays where it is
    return candidate
