"""Which records a run asks for and how far its cursor may move afterwards.

Two ways to run the incremental streams:
- cursor runs (nightly schedule, `lessonsync sync`): since = cursor - lookback, nothing dropped, and the
  cursor advances once the sweep was complete (`next_cursor`, proved below);
- backfills (a date range set in the Launchpad, pipeline/defs/progress/backfill.py): since = range start, one sweep, and every
  row fetched is kept, those updated after the range end too (they are current data, the same the next cursor
  run would write); the range end only bounds which answer versions are recorded. The cursor is left alone (a
  backfill never moves it backwards or past the nightly run).

Why the cursor rule is safe whichever of the platform's clocks runs ahead.

Two clocks show on the wire and the spec ties neither to the other: the DATA clock that stamps lastDate
and the HTTP `Date` header. Assumptions, all about the data clock:
  A1 an update stamps lastDate = the data clock's time, which never goes backwards;
  A2 (read lag L) a version stamped t is listed by every listing served at data-clock time >= t + L, and
     a listing never serves a version before it is stamped;
  A3 (resolution r = RESOLUTION) `updatedSince=s` lists every visible record with lastDate >= s + r: the
     spec does not show the format nor whether it is inclusive, and r covers an exclusive `>` and a
     platform that compares whole seconds (ours sends microseconds; one that rounds them also lands
     within r). A coarser platform needs that much more lookback B, see (2).

Say a run is SAFE UP TO P when every record's newest version stamped before P is in the warehouse after
it. With B the lookback, a run reading `since = C - B` relies on the previous one being safe up to
C - B + r (A3: the listing may skip records stamped in [s, s + r)). A complete sweep that starts at
data time D0 lists, besides, every version stamped in [C - B + r, D0 - L) (A2: visible when the sweep
starts; sweeps.py: no unchanged record skipped, and a record inserted or moved mid-sweep has a newer
version stamped >= D0 - L). So it is safe up to D0 - L, and the next cursor C' is safe when
        C' - B + r <= D0 - L,   i.e.   C' <= D0 - L + B - r.                                (*)
We never know D0. The rule takes C' = min(S - m, M - r), where S is the `Date` of the first response of
the run and m the safety margin, M the greatest lastDate the complete sweep listed; a minimum satisfies
(*) as soon as ONE of its terms does:
  (1) the `Date` term: if the header is at most e ahead of the data clock (S <= D0 + e), S - m satisfies
      (*) when e + L + r <= B + m. A header BEHIND the data clock (e < 0) only makes the term smaller.
  (2) the data term: M was listed during the sweep, so M <= D_end (A2), the data time the sweep ended.
      M - r satisfies (*) when D_end - D0 + L <= B: the lookback covers the read lag plus the sweep's
      duration. The -r cancels the resolution of (*), so A3's r is the price of not knowing updatedSince's
      inclusivity and rounding (without it the lookback would pay it; with lookback 0 a record stamped in
      the same instant as M but committed after the sweep would be lost to an exclusive platform).
So: (a) a `Date` header hours AHEAD of lastDate makes S - m useless and unsafe, but the minimum takes
M - r, bounded by data the platform really served; (b) a header BEHIND only lowers the cursor (the next
window re-reads that much more, losing nothing); (c) a read lag L stays safe while L + sweep duration
<= lookback. A longer lag needs a longer LESSONSYNC_LOOKBACK; nothing else can see a record that is
invisible for longer than every window reaches back.

A window that listed nothing (M unknown) leaves the cursor where it was: moving it would need a clock,
and keeping it is always safe (its old value satisfied (*) for an earlier D0). Never backwards: a cursor
that satisfied (*) for an earlier run satisfies it for a later one (D0 grows), so max(previous, C') does
too; and an incomplete sweep (drift that did not settle) keeps the previous cursor.

Answers have their own cursor; they are planned from the active lessons the warehouse holds, which are
known only as far as the active-lessons cursor, so their cursor is also capped by it (`ceiling`; None,
no active-lessons cursor yet, keeps it): every version an active-lessons run loads is stamped at or after
that run's window start (the versions before it were already loaded, by induction), so the next answers
window, starting no later, plans it. Their M is the newest lastDate of the plan.
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
