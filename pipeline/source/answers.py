"""The answers run: plan requests for the changed active lessons, fetch them concurrently (pages of one
request in order), then check for page drift and fetch again what it may have hit.

Drift in answer listings: they page over active-lesson records, and an active lesson updated mid-sweep
moves, shifting the others. Answer rows do not show every move (an active lesson may have no answers),
so each pass is bracketed by two listings of /v1/active-lessons?updatedSince=X, X = the latest server
time (Date header) seen before the pass minus 2 s: one before, one after. An active lesson in the second
but not the first (by key and lastDate) changed during the pass; every per-lesson or per-user request
whose scope holds one is fetched again. Comparing two listings, not trusting clocks alone, keeps records
updated in the second before X (or a stopped simulated clock) from looking like changes. Per-pair
requests cover one record and cannot drift. After `max_passes` passes with drift still present the run
is marked complete=False.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pyarrow as pa

from pipeline.source.core import Emit, SourceCore
from pipeline.source.planner import PlannedRequest, plan_answer_requests
from pipeline.source.progress import Progress
from pipeline.source.requests import Page, Request, format_updated_since
from pipeline.source.stats import RunStats
from pipeline.source.streams import STREAMS
from pipeline.source.sweeps import run_pool, sweep

log = logging.getLogger("lessonsync.source")
SCOPE = {"answers_by_lesson": "lesson_id", "answers_by_user": "user_id"}
DATE_RESOLUTION = timedelta(seconds=2)  # Date headers have whole seconds; one more for safety
Version = tuple[str, str, str, datetime | None]  # owner, user, lesson, lastDate of an active lesson


Window = tuple[datetime, datetime]  # server-time span one request was in flight, widened by DATE_RESOLUTION


def _aware(instant: datetime | None) -> datetime | None:
    return instant if instant is None or instant.tzinfo is not None else instant.replace(tzinfo=UTC)


class Changes:
    """Active lessons changed between two listings, with their lastDate, per lesson and per user."""

    def __init__(self, versions: set[Version], baseline: set[Version]) -> None:
        changed = versions - baseline
        self.count = len(changed)
        self.per: dict[str, dict[str, list[datetime | None]]] = {"lesson_id": {}, "user_id": {}}
        for _, user, lesson, last in changed:
            self.per["lesson_id"].setdefault(lesson, []).append(_aware(last))
            self.per["user_id"].setdefault(user, []).append(_aware(last))

    def hits(self, planned: PlannedRequest, window: Window | None = None) -> int:
        """Changes in the request's scope (made while it was in flight, when `window` is given: only those
        can have shifted its pages; a change without lastDate always counts)."""
        scope = SCOPE.get(planned.stream)
        dates = [] if scope is None else self.per[scope].get(dict(planned.path_values)[scope], [])
        if window is None:
            return len(dates)
        return sum(1 for d in dates if d is None or window[0] <= d <= window[1])


async def versions_since(core: SourceCore, instant: datetime) -> set[Version] | None:
    """(owner, user, lesson, lastDate) of active lessons changed since `instant`; None when that listing
    could not be read exactly (drift in it too)."""
    found: set[Version] = set()

    async def collect(_: Request, page: Page) -> None:
        if page.own is not None:
            columns = [page.own.column(c).to_pylist() for c in ("owner_id", "user_id", "lesson_id", "last_date")]
            found.update(zip(*columns, strict=True))

    since = format_updated_since(instant, core.updated_since_format)
    listing = Request(STREAMS["active_lessons"], updated_since=since)
    exact = await sweep(core, listing, collect, RunStats("answers drift check"))
    return found if exact else None


NO_DATE_SLACK = timedelta(minutes=5)


async def _pass_start(core: SourceCore) -> datetime:
    """A server instant no later than now: the latest Date seen (asking for a token first if none yet).

    The spec does not promise a Date header; without one our own clock minus 5 minutes stands in, which
    only makes the drift-check listings longer."""
    if core.transport.latest_server_time() is None:
        await core.transport.auth.bearer()
    seen = core.transport.latest_server_time()
    if seen is None:
        log.warning("the platform sends no Date header: answer drift checks use the local clock minus %s",
                    NO_DATE_SLACK)
        return datetime.now(UTC) - NO_DATE_SLACK
    return seen - DATE_RESOLUTION


async def run_answers(core: SourceCore, changed: pa.Table, updated_since: datetime | None,
                      emit: Emit) -> RunStats:
    """Answers of every (user_id, lesson_id) in `changed`, which must hold every active lesson changed since
    `updated_since` (all of them when it is None): request coverage counts come from it. With a boolean
    `refetch` column only the pairs marked true need their answers (the planner covers just those; the
    others still count in what a per-lesson or per-user request returns)."""
    stats, progress = core.start_stats("answers"), Progress("answers")
    plan = plan_answer_requests(changed, core.settings.page_size)
    stats.planned_requests = plan.request_count
    since = None if updated_since is None else format_updated_since(updated_since, core.updated_since_format)

    extra: Counter[PlannedRequest] = Counter()  # records known to have joined a request's scope since planning
    windows: dict[PlannedRequest, Window] = {}

    async def fetch(planned: PlannedRequest) -> None:
        request = Request(STREAMS[planned.stream], dict(planned.path_values), since, planned.covers + extra[planned])
        mark = core.transport.clock_mark()
        async for page in core.pages(request):
            await core.emit_page(page, emit, stats, progress)
        if planned.stream in SCOPE:
            start, end = mark.server_start(), core.transport.latest_server_time()
            if start is not None and end is not None:
                windows[planned] = (start - DATE_RESOLUTION, end + DATE_RESOLUTION)

    first_mark = core.transport.clock_mark()
    first_check: datetime | None = None
    pending: Iterable[PlannedRequest] = plan.requests()  # lazily: pairs never all become objects
    candidates = [p for p in plan.grouped if p.stream in SCOPE]  # fetched this pass and able to drift
    for number in range(1, core.max_passes + 1):
        stats.passes = number
        check_since = await _pass_start(core)
        first_check = check_since if number == 1 else first_check
        baseline = await versions_since(core, check_since) if candidates else set()
        await run_pool(pending, fetch, core.settings.concurrency)
        after = await versions_since(core, check_since) if candidates else set()
        changes = Changes(after, baseline) if after is not None and baseline is not None else None
        redo = [p for p in candidates if changes is None or changes.hits(p, windows.get(p))]
        if not redo:
            break
        if number == core.max_passes:
            stats.complete = False
            log.warning("answers: %d request(s) still hit by page drift after %d passes; the result is "
                        "marked incomplete, the cursor must not advance", len(redo), number)
            break
        log.warning("answers: %s active lesson(s) changed during pass %d; fetching the %d request(s) they "
                    "may have shifted again", "some" if changes is None else changes.count, number, len(redo))
        for p in redo:
            extra[p] += 0 if changes is None else changes.hits(p)
        pending = candidates = redo
    # A run with nothing to fetch may have made no request after the mark: the pass start (a server
    # instant seen before any fetching) is then the conservative start, never the local clock.
    stats.server_time_at_start = first_mark.server_start() or first_check
    progress.report("done")
    return stats.finish()
