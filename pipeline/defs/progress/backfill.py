"""Backfills: re-read a date range of the incremental streams in one run, set in the Launchpad.

The incremental assets are not partitioned: their table is the current state of every record, and a record
moves from day to day each time it is updated, so a daily partition could never say "this day is loaded".
Cursor runs (nightly, `lessonsync sync`, "Materialize all") each materialize the whole table once. A backfill
is the same asset with this resource configured at launch:

    resources:
      backfill:
        config: {updated_from: "2025-06-01", updated_to: "2025-06-30"}

One run, one sweep of the API (`updatedSince` = start of `updated_from`), every row fetched kept (rows updated
after the range are current data too), and the cursor left alone.

Every other run leaves the resource unset: a cursor run. So the `backfill_progress` job's config requires
`updated_from` (RANGE_REQUIRED: the Launchpad shows what is missing before launch), and a run tagged as a backfill
without a range is refused before any fetch (`window(backfill_run=True)`): unset, it would read from the cursor
and move it."""

from __future__ import annotations

import warnings
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from dagster import BetaWarning, ConfigMapping, ConfigurableResource, Failure, Permissive
from dagster import Field as ConfigField
from pydantic import Field

from pipeline.raw.windows import Window, partition_window

# `--select group:...` resolves through AssetSelection.groups, whose `include_sources` parameter is beta; Dagster's
# notice about it opened every `lessonsync` command and `make demo`.
warnings.filterwarnings("ignore", message=r"Parameter `include_sources` .*is currently in beta", category=BetaWarning)


class BackfillWindow(ConfigurableResource[Any]):
    """Unset (the default): runs read from the cursor. Set `updated_from` at launch to backfill a date range."""

    updated_from: str | None = Field(
        default=None, description="First UTC day (YYYY-MM-DD) of the range to re-read; unset = an ordinary cursor run."
    )
    updated_to: str | None = Field(
        default=None,
        description="Last UTC day of the range (inclusive; default: today). Rows updated later are kept "
        "too: they are current data, the same the next cursor run would write.",
    )

    def window(self, *, backfill_run: bool = False) -> Window | None:
        """The backfill window, or None for a cursor run; a `backfill_run` (a run tagged as one) without a range is
        refused: it would be a cursor run and move the cursor."""
        if self.updated_from is None:
            if backfill_run:
                raise Failure(NO_RANGE)
            if self.updated_to is not None:
                raise Failure(
                    f"backfill.updated_to={self.updated_to!r} without updated_from: set both, "
                    "or neither for a cursor run"
                )
            return None
        start = _day("updated_from", self.updated_from)
        end = _day("updated_to", self.updated_to) if self.updated_to is not None else datetime.now(UTC).date()
        if end < start:
            raise Failure(f"backfill range {start} .. {end} ends before it starts")
        return partition_window(_midnight(start), _midnight(end + timedelta(days=1)))


NO_RANGE = (
    "a backfill needs its range: set resources.backfill.config.updated_from (first UTC day, YYYY-MM-DD) and "
    "optionally updated_to (last day, default today) in the Launchpad; without them the run would read from the "
    "cursor and move it"
)
_DESCRIBED = BackfillWindow.model_fields


def _open(fields: dict[str, Any]) -> Any:
    """A config dict with `fields` checked and any other key let through (Dagster's config types are untyped)."""
    return Permissive(fields)  # type: ignore[no-untyped-call]


def _range_config() -> Any:
    """resources.backfill.config with `updated_from` required; every other key of the run config as usual (checked
    against the job's own schema once mapped)."""
    range_ = _open(
        {
            "updated_from": ConfigField(str, description=_DESCRIBED["updated_from"].description),
            "updated_to": ConfigField(str, is_required=False, description=_DESCRIBED["updated_to"].description),
        }
    )
    return _open({"resources": _open({"backfill": _open({"config": ConfigField(range_)})})})


# The backfill job's run config: the job's own, with the range required (the Launchpad names it when missing).
RANGE_REQUIRED = ConfigMapping(config_schema=_range_config(), config_fn=dict)


def _day(name: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise Failure(f"backfill.{name}={text!r} is not a day; use YYYY-MM-DD, e.g. 2025-06-01") from None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)
