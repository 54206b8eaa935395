"""Answers: which requests fetch the answers of the changed active lessons (the plan), and the run that fetches
them exactly.

The plan is a weighted set cover over three endpoints: per lesson and per user (each returns every pair of its
scope in the window, and costs ceil(n / pageSize) + 1 requests, the last a confirming empty page) or per pair
(2). Only the pairs marked `refetch` need covering, but a grouped request's cost counts every pair of its scope.
Greedy in buckets: each round takes every lesson and user whose cost per uncovered pair is within 25% of the
best, while that beats 2; ratios only grow, so rounds are few (~30 at most), each a pair of Arrow group-bys with
no Python loop over pairs.

The run fetches the plan concurrently, then checks for page drift with two listings of the active lessons
bracketing each pass and fetches again what it may have hit: docs/design.md, "Answers: drift".
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.contract.streams import STREAMS, UPDATED_SINCE_RESOLUTION
from pipeline.source.decode_workers import START_AT_RECORDS, START_AT_RECORDS_PER_PAGE
from pipeline.source.decoding import Page
from pipeline.source.fetching import Emit, SourceCore
from pipeline.source.paging import Request, answer_request_cost, format_updated_since
from pipeline.source.stats import Progress, RunStats
from pipeline.source.sweeps import run_pool, sweep

log = logging.getLogger("lessonsync.source")


# The plan

PAIR_COST = 2  # one page and one confirming empty page
BUCKET = 1.25


@dataclass(frozen=True)
class PlannedRequest:
    stream: str  # answers_by_lesson | answers_by_user | answers_by_user_lesson
    path_values: tuple[tuple[str, str], ...]
    covers: int  # changed active-lesson records the request returns


@dataclass
class AnswerPlan:
    grouped: list[PlannedRequest]  # per lesson and per user, largest first
    pairs: pa.Table  # leftovers, one per-pair request each (user_id, lesson_id)

    @property
    def request_count(self) -> int:
        return len(self.grouped) + int(self.pairs.num_rows)

    def records_per_page(self, page_size: int) -> float:
        """Active-lesson records a page of the plan holds on average, confirming pages left out."""
        records = sum(r.covers for r in self.grouped) + self.pairs.num_rows
        pages = sum(answer_request_cost(r.covers, page_size) - 1 for r in self.grouped) + self.pairs.num_rows
        return records / pages if pages else 0.0

    def estimated_cost(self, page_size: int) -> int:
        return sum(answer_request_cost(r.covers, page_size) for r in self.grouped) + PAIR_COST * int(
            self.pairs.num_rows
        )

    def requests(self) -> Iterator[PlannedRequest]:
        yield from self.grouped
        for batch in self.pairs.to_batches(max_chunksize=10_000):  # lazily: never all pairs as objects
            for user_id, lesson_id in zip(
                batch.column("user_id").to_pylist(), batch.column("lesson_id").to_pylist(), strict=True
            ):
                yield PlannedRequest("answers_by_user_lesson", (("user_id", user_id), ("lesson_id", lesson_id)), 1)


REFETCH = "refetch"  # optional boolean column of the planner's input: cover this pair (default: every pair)


def _distinct_pairs(changed: pa.Table) -> tuple[pa.Table, pa.Table, dict[str, pa.Array]]:
    """Distinct pairs as int32 codes (cheap to group and filter at a million rows): all of them, and those
    to cover (a pair is covered when any of its rows has refetch true), plus the id of each code."""
    missing = {"user_id", "lesson_id"} - set(changed.column_names)
    if missing:
        raise ValueError(f"changed pairs need columns user_id and lesson_id; missing {sorted(missing)}")
    names, codes = {}, {}
    for column in ("user_id", "lesson_id"):
        encoded = _encoded(changed.column(column))
        if encoded.null_count:
            raise ValueError("changed pairs contain a null user_id or lesson_id; they cannot address answers")
        codes[column] = pa.chunked_array([chunk.indices.cast(pa.int32()) for chunk in encoded.chunks], type=pa.int32())
        names[column] = (
            encoded.chunks[0].dictionary.cast(pa.string()) if encoded.num_chunks else pa.array([], pa.string())
        )
    pairs = pa.table(codes)
    every = pairs.group_by(["user_id", "lesson_id"], use_threads=False).aggregate([])
    if REFETCH not in changed.column_names:
        return every, every, names
    flags = changed.column(REFETCH)
    if flags.null_count:
        raise ValueError(f"the {REFETCH} column holds nulls; say true or false for every pair")
    wanted = pairs.filter(flags.cast(pa.bool_())).group_by(["user_id", "lesson_id"], use_threads=False).aggregate([])
    return every, wanted, names


def _encoded(ids: pa.ChunkedArray) -> pa.ChunkedArray:
    """`ids` dictionary-encoded with one dictionary of distinct ids for every chunk. Ids that come encoded
    (the spilled window, read with its dictionaries) keep their codes: only the chunks' dictionaries are
    merged; a dictionary that repeats a value or holds a null is encoded again, so a code is one id."""
    if not pa.types.is_dictionary(ids.type):
        return pc.dictionary_encode(ids.cast(pa.string()))  # chunk by chunk, one dictionary for all
    unified = pa.table({"ids": ids}).unify_dictionaries().column("ids")
    dictionary = unified.chunks[0].dictionary if unified.num_chunks else None
    if dictionary is not None and (dictionary.null_count or pc.count_distinct(dictionary).as_py() != len(dictionary)):
        return pc.dictionary_encode(ids.cast(pa.string()))
    return unified


def _ratios(remaining: pa.Table, column: str, totals: pa.Table, page_size: int) -> pa.Table:
    """Per value of `column`: its request cost (from all its pairs) over its still-uncovered pairs."""
    uncovered = remaining.group_by(column, use_threads=False).aggregate([([], "count_all")])
    joined = uncovered.join(totals, column, use_threads=False)
    covers = joined.column("total")
    cost = pc.add(pc.ceil(pc.divide(pc.cast(covers, pa.float64()), float(page_size))), 1.0)
    ratio = pc.divide(cost, pc.cast(joined.column("count_all"), pa.float64()))
    return pa.table({column: joined.column(column), "covers": covers, "ratio": ratio})


def plan_answer_requests(changed: pa.Table, page_size: int) -> AnswerPlan:
    """The bucketed-greedy plan covering every (user_id, lesson_id) of `changed` (duplicates allowed), or
    only those with `refetch` true when that column is present (the others still count in request costs)."""
    every, remaining, names = _distinct_pairs(changed)
    totals = {
        c: every.group_by(c, use_threads=False).aggregate([([], "count_all")]).rename_columns([c, "total"])
        for c in ("lesson_id", "user_id")
    }
    streams = {"lesson_id": "answers_by_lesson", "user_id": "answers_by_user"}
    grouped: list[PlannedRequest] = []
    while remaining.num_rows:
        ratios = {c: _ratios(remaining, c, totals[c], page_size) for c in streams}
        best = min(pc.min(r.column("ratio")).as_py() for r in ratios.values())
        if best >= PAIR_COST:
            break
        limit = min(best * BUCKET, PAIR_COST - 1e-9)
        for column, table in ratios.items():
            chosen = table.filter(pc.less_equal(table.column("ratio"), limit))
            if chosen.num_rows == 0:
                continue
            values = names[column].take(chosen.column(column).combine_chunks())
            for value, covers in zip(values.to_pylist(), chosen.column("covers").to_pylist(), strict=True):
                grouped.append(PlannedRequest(streams[column], ((column, value),), covers))
            remaining = remaining.filter(pc.invert(pc.is_in(remaining.column(column), chosen.column(column))))
    grouped.sort(key=lambda r: -r.covers)
    leftovers = pa.table({c: names[c].take(remaining.column(c).combine_chunks()) for c in ("user_id", "lesson_id")})
    pa.default_memory_pool().release_unused()  # the group-bys' scratch memory, back to the OS
    return AnswerPlan(grouped, leftovers)


# The run

SCOPE = {"answers_by_lesson": "lesson_id", "answers_by_user": "user_id"}
DATE_RESOLUTION = timedelta(seconds=2)  # Date headers have whole seconds; one more for safety
Version = tuple[str, str, str, datetime | None]  # owner, user, lesson, lastDate of an active lesson


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

    def hits(self, planned: PlannedRequest) -> int:
        """Changes in the request's scope (any of them may have shifted its pages)."""
        scope = SCOPE.get(planned.stream)
        return 0 if scope is None else len(self.per[scope].get(dict(planned.path_values)[scope], []))


async def versions_since(core: SourceCore, instant: datetime, known: int = 0) -> set[Version] | None:
    """(owner, user, lesson, lastDate) of active lessons changed since `instant`; None when that listing
    could not be read exactly (drift in it too). `known`: how many it holds at least (the planned active lessons
    past `instant`, or what an earlier check found: a record changed since `instant` stays so), so that its pages
    are asked at once (record_pages)."""
    found: set[Version] = set()

    async def collect(_: Request, page: Page) -> None:
        if page.own is not None:
            columns = [page.own.column(c).to_pylist() for c in ("owner_id", "user_id", "lesson_id", "last_date")]
            found.update(zip(*columns, strict=True))

    since = format_updated_since(instant, core.updated_since_format)
    listing = Request(STREAMS["active_lessons"], updated_since=since, covers=known)
    exact = await sweep(core, listing, collect, RunStats("answers drift check"))
    return found if exact else None


NO_DATE_SLACK = timedelta(minutes=5)


async def _check_since(core: SourceCore, newest_planned: datetime | None) -> datetime:
    """X of the drift-check listings (module docstring): min(newest planned lastDate - lookback -
    resolution, latest Date - 2 s), asking for a token first if no Date was seen yet. Without either (no
    Date header and no lastDate in the plan) our own clock minus 5 minutes stands in."""
    if core.transport.latest_server_time() is None:
        await core.transport.auth.bearer()
    seen = core.transport.latest_server_time()
    bounds = [] if seen is None else [seen - DATE_RESOLUTION]
    if newest_planned is not None:
        bounds.append(newest_planned - core.settings.lookback - UPDATED_SINCE_RESOLUTION)
    return min(bounds) if bounds else datetime.now(UTC) - NO_DATE_SLACK


def _to_fetch(changed: pa.Table) -> int:
    """Active lessons of `changed` whose answers are to be fetched (every one without a `refetch` column)."""
    if REFETCH not in changed.column_names:
        return int(changed.num_rows)
    return int(pc.sum(changed.column(REFETCH).cast(pa.int64())).as_py() or 0)


def _listed_since(changed: pa.Table, instant: datetime) -> int:
    """Active lessons of `changed` that a listing changed since `instant` holds for certain (a lower bound for
    versions_since): distinct pairs whose lastDate is a resolution past it, as the platform's filter may be
    exclusive or whole-second; 0 without lastDates."""
    if "last_date" not in changed.column_names:
        return 0
    dates = changed.column("last_date")
    bound = instant + UPDATED_SINCE_RESOLUTION
    if getattr(dates.type, "tz", None) is None:
        bound = bound.astimezone(UTC).replace(tzinfo=None)  # naive lastDates are UTC (_aware)
    recent = changed.filter(pc.greater(dates, pa.scalar(bound, type=dates.type)))
    # as strings: the spilled window's ids come dictionary-encoded, a dictionary per chunk
    pairs = pa.table({c: recent.column(c).cast(pa.string()) for c in ("user_id", "lesson_id")})
    return int(pairs.group_by(["user_id", "lesson_id"], use_threads=False).aggregate([]).num_rows)


def _newest(changed: pa.Table) -> datetime | None:
    if "last_date" not in changed.column_names:
        return None
    newest = pc.max(changed.column("last_date")).as_py()
    return None if newest is None else _aware(newest)


async def run_answers(core: SourceCore, changed: pa.Table, updated_since: datetime | None, emit: Emit) -> RunStats:
    """Answers of every (user_id, lesson_id) in `changed`, which must hold every active lesson changed since
    `updated_since` (all of them when it is None): request coverage counts come from it. With a boolean
    `refetch` column only the pairs marked true need their answers (the planner covers just those; the
    others still count in what a per-lesson or per-user request returns)."""
    try:
        return await _run_answers(core, changed, updated_since, emit)
    finally:
        core.decode_workers.release()  # their memory back before the commit (decode_workers.py)


async def _run_answers(core: SourceCore, changed: pa.Table, updated_since: datetime | None, emit: Emit) -> RunStats:
    stats, progress = core.start_stats("answers"), Progress("answers")
    plan = plan_answer_requests(changed, core.settings.page_size)
    stats.planned_requests = progress.planned = plan.request_count
    # Pages worth a worker process: start it now, not at the first large page. Counted on the pairs to fetch: an
    # incremental run's window holds many active lessons whose answers are not needed, and its small pages would
    # keep a worker's memory for nothing.
    # Many pairs in small pages (a request a lesson, a few of its active lessons each) start none either.
    if (
        _to_fetch(changed) >= START_AT_RECORDS
        and plan.records_per_page(core.settings.page_size) >= START_AT_RECORDS_PER_PAGE
    ):
        core.decode_workers.start()
    # Asked from one resolution earlier than the plan's window: the platform filters by the active lesson's
    # lastDate, and an exclusive or whole-second updatedSince must not drop a planned one (windows.py, A3).
    since = (
        None
        if updated_since is None
        else format_updated_since(updated_since - UPDATED_SINCE_RESOLUTION, core.updated_since_format)
    )
    newest_planned = _newest(changed)

    extra: Counter[PlannedRequest] = Counter()  # records known to have joined a request's scope since planning

    async def fetch(planned: PlannedRequest) -> None:
        request = Request(STREAMS[planned.stream], dict(planned.path_values), since, planned.covers + extra[planned])
        async for page in core.pages(request):
            await core.emit_page(page, emit, stats, progress)
        progress.request_done()

    first_mark = core.transport.clock_mark()
    first_check: datetime | None = None
    pending: Iterable[PlannedRequest] = plan.requests()  # lazily: pairs never all become objects
    candidates = [p for p in plan.grouped if p.stream in SCOPE]  # fetched this pass and able to drift
    for number in range(1, core.max_passes + 1):
        stats.passes = number
        check_since = await _check_since(core, newest_planned)
        first_check = check_since if number == 1 else first_check
        # each drift check asks the pages it is known to fill at once (record_pages): the first one, from the
        # planned active lessons; the second, every record the first one found (it cannot hold fewer)
        baseline = await versions_since(core, check_since, _listed_since(changed, check_since)) if candidates else set()
        await run_pool(pending, fetch, core.kept_ready)
        after = await versions_since(core, check_since, len(baseline or ())) if candidates else set()
        changes = Changes(after, baseline) if after is not None and baseline is not None else None
        redo = [p for p in candidates if changes is None or changes.hits(p)]
        if not redo:
            break
        if number == core.max_passes:
            stats.complete = False
            log.warning(
                "answers: %d request(s) still hit by page drift after %d passes; the result is "
                "marked incomplete, the cursor must not advance",
                len(redo),
                number,
            )
            break
        log.warning(
            "answers: %s active lesson(s) changed during pass %d; fetching the %d request(s) they "
            "may have shifted again",
            "some" if changes is None else changes.count,
            number,
            len(redo),
        )
        for p in redo:
            extra[p] += 0 if changes is None else changes.hits(p)
        pending = candidates = redo
    # A run with nothing to fetch may have made no request after the mark: the pass start (a server
    # instant seen before any fetching) is then the conservative start, never the local clock.
    stats.server_time_at_start = first_mark.server_start() or first_check
    stats.newest_last_date = newest_planned  # the answers' "listing" is the plan (windows.py: their cursor)
    progress.report("done")
    return stats.finish()
