"""Do the platform's two clocks agree? Its `Date` header and the clock that stamps lastDate are compared
once per run (when the active lessons, the stream that lists lastDates, commit): the cursor rule is safe either
way (pipeline/raw/windows.py), but a difference beyond the lookback is worth a word to whoever runs the sync."""

from __future__ import annotations

from datetime import timedelta

from dagster import AssetExecutionContext

from pipeline.defs.common import Metadata
from pipeline.source import RunStats

SKEW_KEY = "platform_clock_skew_s"


def clock_skew_metadata(context: AssetExecutionContext, stats: RunStats, lookback: timedelta) -> Metadata:
    """`platform_clock_skew_s`: the `Date` header at the run's start minus the newest lastDate it listed
    (positive: the header is ahead, or reads lag, or nothing changed lately), None when either is unknown.
    Warns when the two disagree by more than the lookback, and when the platform sends no Date header."""
    date, newest = stats.server_time_at_start, stats.newest_last_date
    if date is None:
        context.log.warning(
            "the platform sends no Date header: each cursor is bounded by the newest lastDate its "
            "run listed and by our own clock instead (docs/exactness.md)"
        )
    if date is None or newest is None:
        return {SKEW_KEY: None}
    skew = date - newest
    if skew > lookback:
        context.log.warning(
            f"platform clocks: its Date header ({date.isoformat()}) is {skew} ahead of the newest lastDate "
            f"listed ({newest.isoformat()}), more than the lookback ({lookback}): the Date header runs ahead of "
            "the clock stamping lastDate, or reads lag, or nothing changed for that long. The cursor follows "
            "the newest lastDate, so nothing is missed (docs/exactness.md)"
        )
    elif -skew > lookback:
        context.log.warning(
            f"platform clocks: the newest lastDate listed ({newest.isoformat()}) is {-skew} ahead of its Date "
            f"header ({date.isoformat()}), more than the lookback ({lookback}): the Date header runs behind the "
            "clock stamping lastDate. The cursor follows the Date header, so each run re-reads that much more "
            "(docs/exactness.md)"
        )
    return {SKEW_KEY: round(skew.total_seconds(), 3)}
