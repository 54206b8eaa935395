"""Which streams a run fetches ahead, and from where: every stream whose step the run will execute and whose
window is known before any step commits. That is every snapshot (pulled whole) and the active lessons (their
window comes from the cursor, read here). The answers are planned from the active lessons of the sweep, so the
active-lessons step starts their fetch once its listing is complete (pipeline/defs/progress/answers_ahead.py);
a run without that step has the answers step fetch them itself, through the same client."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from pipeline.contract.streams import SNAPSHOT_STREAMS
from pipeline.contract.tables import TABLES
from pipeline.defs.windows import SNAPSHOT_WINDOW, Window
from pipeline.prefetch.background import BackgroundFetch
from pipeline.prefetch.runs import RunFetches
from pipeline.source.slots import BACKGROUND, URGENT
from pipeline.warehouse import Warehouse

# step key -> stream: the step of asset lms/active_lessons is keyed `lms__active_lessons` (it was keyed
# `active_lessons` here, which no step of a job has: the first step then created the tables and read the cursor
# twice, once to start the others' fetches and once for its own)
INCREMENTAL_STEPS = {"lms__active_lessons": "active_lessons"}


def stream_of_step(step_key: str) -> str | None:
    """The stream a step fetches ahead of time: `active_lessons`, or `sync_<snapshot stream>`."""
    if step_key in INCREMENTAL_STEPS:
        return INCREMENTAL_STEPS[step_key]
    name = step_key.removeprefix("sync_")
    return name if step_key.startswith("sync_") and name in SNAPSHOT_STREAMS else None


# The step key of the answers multi-asset; its stream is fetched ahead too, from the active-lessons step
# (pipeline/defs/progress/answers_ahead.py), not at the run's start
ANSWERS_STEP = "answers"


def awaited_stream(step_key: str) -> str | None:
    """The background fetch a step commits, if any: the one it waits for when it runs before that fetch ends."""
    return "answers" if step_key == ANSWERS_STEP else stream_of_step(step_key)


def start_prefetch(
    run: RunFetches,
    warehouse: Warehouse,
    step_keys: Iterable[str],
    incremental_window: Callable[[datetime | None], Window],
) -> list[str]:
    """Start the background fetch of every stream of `step_keys` (the steps this run executes); returns them.
    The tables are created first and the cursors read on one connection (the calling step holds the
    `warehouse` pool); `incremental_window(cursor)` is the window an incremental stream reads."""
    incremental = set(INCREMENTAL_STEPS.values())
    # the incremental stream starts first: the answers wait for its listing, the snapshots wait for nothing
    streams = sorted(
        {s for s in map(stream_of_step, step_keys) if s is not None}, key=lambda name: (name not in incremental, name)
    )
    if not streams:
        return []
    with warehouse.one_connection():
        warehouse.ensure_tables(TABLES.values())
        planned = {}
        for stream in streams:
            cursor = warehouse.cursor(stream) if stream in incremental else None
            planned[stream] = (incremental_window(cursor) if stream in incremental else SNAPSHOT_WINDOW, cursor)
    for stream, (window, cursor) in planned.items():
        batches = run.client.iter_stream(stream, updated_since=window.since)
        # the answers wait for the active lessons' listing; the snapshots wait for nothing: they take the slots
        # the progress streams leave (before, between and during their commits)
        priority = URGENT if stream in incremental else BACKGROUND
        run.add(BackgroundFetch(warehouse, run.client, stream, run.run_id, window, cursor, batches, priority))
    return streams
