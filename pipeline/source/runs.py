"""Runs of named record streams (active_lessons, groups with their users, lessons, sessions, categories):
requests built from the stream declarations, swept exactly, batches emitted, statistics returned."""

from __future__ import annotations

import logging
from datetime import datetime

from pipeline.source.core import Emit, SourceCore
from pipeline.source.progress import Progress
from pipeline.source.requests import Page, Request, format_updated_since
from pipeline.source.stats import RunStats
from pipeline.source.streams import ANSWER_STREAMS, STREAMS, StreamSpec
from pipeline.source.sweeps import HandlePage, run_pool, sweep

log = logging.getLogger("lessonsync.source")
RUNNABLE = tuple(name for name, s in STREAMS.items()
                 if name not in ANSWER_STREAMS and not any(p.substream and p.substream.stream == name
                                                           for p in STREAMS.values()))


def runnable_stream(name: str, updated_since: datetime | None) -> StreamSpec:
    """The stream named `name`, checked for use with iter_stream; errors say what to call instead."""
    if name == "answers" or name in ANSWER_STREAMS:
        raise ValueError("answers are fetched for changed active lessons: use iter_answers(changed_pairs, "
                         "updated_since=...)")
    if name not in RUNNABLE:
        raise ValueError(f"unknown stream {name!r}; streams: {', '.join(RUNNABLE)}")
    stream = STREAMS[name]
    if updated_since is not None and not stream.incremental:
        raise ValueError(f"stream {name} is a snapshot, pulled whole; call it without updated_since")
    return stream


async def run_stream(core: SourceCore, name: str, updated_since: datetime | None, emit: Emit) -> RunStats:
    """Every record of stream `name` (changed since `updated_since` for incremental streams)."""
    stream = runnable_stream(name, updated_since)
    stats, progress = core.start_stats(name), Progress(name)
    mark = core.transport.clock_mark()
    since = None if updated_since is None else format_updated_since(updated_since, core.updated_since_format)

    async def handle(request: Request, page: Page) -> None:
        await core.emit_page(page, emit, stats, progress)

    request = Request(stream, updated_since=since)
    if stream.substream is None:
        stats.complete = await sweep(core, request, handle, stats)
    else:
        stats.complete = await _with_substream(core, request, handle, stats)
    if not stats.complete:
        log.warning("%s: page drift persisted; the rows were yielded but the result is marked incomplete: "
                    "do not advance the cursor past this window", name)
    stats.server_time_at_start = mark.server_start()
    progress.report("done")
    return stats.finish()


async def _with_substream(core: SourceCore, request: Request, handle: HandlePage, stats: RunStats) -> bool:
    """The parent listing (e.g. groups), then the sub-listing of every parent (its users), concurrently.

    Parent ids are kept (a dict, in order, deduplicated across passes); the sub-records are not: a user in
    several groups is yielded once per group and the warehouse dedupes `users` on its key.
    """
    sub = request.stream.substream
    assert sub is not None
    parents: dict[str, None] = {}

    async def handle_parent(parent_request: Request, page: Page) -> None:
        if page.own is not None:
            parents.update(dict.fromkeys(page.own.column(sub.column).to_pylist()))
        await handle(parent_request, page)

    complete = await sweep(core, request, handle_parent, stats)
    child_stream = STREAMS[sub.stream]
    results: list[bool] = []

    async def one(parent_id: str) -> None:
        child = Request(child_stream, {sub.placeholder: parent_id})
        results.append(await sweep(core, child, handle, stats))

    await run_pool(parents, one, core.settings.concurrency)
    return complete and all(results)
