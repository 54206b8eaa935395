from datetime import UTC, datetime, timedelta

from pipeline.windows import cursor_window, next_cursor, partition_window

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MARGIN = timedelta(seconds=30)


def test_first_run_and_full_refresh_read_everything():
    assert cursor_window(None, timedelta(minutes=10)).since is None
    assert cursor_window(T0, timedelta(minutes=10), full_refresh=True).since is None


def test_incremental_window_starts_lookback_before_cursor():
    window = cursor_window(T0, timedelta(minutes=10))
    assert window.since == T0 - timedelta(minutes=10)
    assert window.until is None and window.moves_cursor


def test_cursor_moves_to_server_run_start_minus_margin():
    window = cursor_window(T0, timedelta(minutes=10))
    start = T0 + timedelta(days=1)
    assert next_cursor(window, T0, start, MARGIN, complete=True) == start - MARGIN


def test_incomplete_sweep_keeps_the_cursor():
    window = cursor_window(T0, timedelta(minutes=10))
    assert next_cursor(window, T0, T0 + timedelta(days=1), MARGIN, complete=False) == T0


def test_cursor_never_moves_backwards():
    future = T0 + timedelta(days=365)
    window = cursor_window(future, timedelta(minutes=10))
    assert next_cursor(window, future, T0, MARGIN, complete=True) == future


def test_backfill_leaves_cursor_alone_and_bounds_rows():
    window = partition_window(T0, T0 + timedelta(days=30))
    assert window.until == T0 + timedelta(days=30)
    assert next_cursor(window, T0, T0 + timedelta(days=60), MARGIN, complete=True) == T0
    assert next_cursor(window, None, T0 + timedelta(days=60), MARGIN, complete=True) is None
