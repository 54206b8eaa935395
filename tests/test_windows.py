from datetime import UTC, datetime, timedelta

from pipeline.raw.windows import RESOLUTION, cursor_window, next_cursor, partition_window

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MARGIN = timedelta(seconds=30)
LOOKBACK = timedelta(minutes=10)
HOUR = timedelta(hours=1)


def _next(previous, *, start, newest, complete=True, window=None, ceiling=None):
    window = window or cursor_window(previous, LOOKBACK)
    extra = {} if ceiling is None else {"ceiling": ceiling}
    return next_cursor(
        window, previous, server_run_start=start, newest_listed=newest, safety_margin=MARGIN, complete=complete, **extra
    )


def test_first_run_and_full_refresh_read_everything():
    assert cursor_window(None, LOOKBACK).since is None
    assert cursor_window(T0, LOOKBACK, full_refresh=True).since is None


def test_incremental_window_starts_lookback_before_cursor():
    window = cursor_window(T0, LOOKBACK)
    assert window.since == T0 - LOOKBACK
    assert window.until is None and window.moves_cursor


def test_clocks_in_agreement_the_cursor_moves_to_server_run_start_minus_margin():
    start = T0 + timedelta(days=1)
    assert _next(T0, start=start, newest=start - timedelta(seconds=5)) == start - MARGIN


def test_a_date_header_ahead_of_the_data_cannot_pull_the_cursor_past_what_was_listed():
    newest = T0 + timedelta(days=1)
    assert _next(T0, start=newest + 2 * HOUR, newest=newest) == newest - RESOLUTION


def test_a_date_header_behind_the_data_holds_the_cursor_back():
    newest = T0 + timedelta(days=1)
    assert _next(T0, start=newest - 2 * HOUR, newest=newest) == newest - 2 * HOUR - MARGIN


def test_without_a_date_header_the_data_alone_bounds_the_cursor():
    newest = T0 + timedelta(days=1)
    assert _next(T0, start=None, newest=newest) == newest - RESOLUTION


def test_a_window_that_listed_nothing_keeps_its_cursor():
    assert _next(T0, start=T0 + timedelta(days=1), newest=None) == T0
    assert _next(None, start=T0, newest=None) is None  # an empty platform: the next run is full again


def test_incomplete_sweep_keeps_the_cursor():
    assert _next(T0, start=T0 + timedelta(days=1), newest=T0 + HOUR, complete=False) == T0


def test_cursor_never_moves_backwards():
    future = T0 + timedelta(days=365)
    assert _next(future, start=T0, newest=T0) == future
    # a window that re-listed only records older than the cursor (the lookback) does not pull it back
    assert _next(T0, start=T0 + HOUR, newest=T0 - timedelta(minutes=5)) == T0


def test_a_ceiling_caps_the_cursor_and_a_missing_one_keeps_it():
    newest = T0 + timedelta(days=1)
    assert _next(T0, start=newest, newest=newest, ceiling=T0 + HOUR) == T0 + HOUR
    assert (
        next_cursor(
            cursor_window(T0, LOOKBACK),
            T0,
            server_run_start=newest,
            newest_listed=newest,
            safety_margin=MARGIN,
            complete=True,
            ceiling=None,
        )
        == T0
    )


def test_the_rule_loses_nothing_whichever_clock_runs_ahead_under_a_read_lag():
    """The proof of pipeline/raw/windows.py, played out: records stamped every 7 s by the data clock, visible
    `lag` later; each run lists what is visible and stamped at or after its window start plus the
    resolution, its sweep lasting `sweep`; after every run, each record stamped before the data time the
    next window can no longer reach must have been listed."""
    step, sweep, runs_every = timedelta(seconds=7), timedelta(seconds=40), timedelta(minutes=17)
    for offset in (-2 * HOUR, timedelta(0), 2 * HOUR):
        for lag in (timedelta(0), timedelta(minutes=4), LOOKBACK - sweep):
            stamps = [T0 + i * step for i in range(3000)]
            listed: set[datetime] = set()
            cursor, data_now = None, T0 + HOUR
            while data_now < stamps[-1]:
                since = None if cursor is None else cursor - LOOKBACK + RESOLUTION  # A3: the worst platform
                seen = [
                    t
                    for t in stamps
                    if t + lag <= data_now + sweep * (t.second % 2)  # some appear mid-sweep
                    and t <= data_now + sweep
                    and (since is None or t >= since)
                ]
                listed.update(seen)
                cursor = _next(
                    cursor,
                    start=data_now + offset,
                    newest=max(seen, default=None),
                    window=cursor_window(cursor, LOOKBACK),
                )
                reach = cursor - LOOKBACK + RESOLUTION
                missed = [t for t in stamps if t < reach and t not in listed]
                assert not missed, (offset, lag, missed[:3])
                data_now += runs_every


def test_backfill_leaves_cursor_alone_and_bounds_rows():
    window = partition_window(T0, T0 + timedelta(days=30))
    assert window.until == T0 + timedelta(days=30)
    assert _next(T0, start=T0 + timedelta(days=60), newest=T0 + timedelta(days=59), window=window) == T0
    assert _next(None, start=T0 + timedelta(days=60), newest=T0 + timedelta(days=59), window=window) is None
