"""Answers: which requests fetch the answers of the changed active lessons (the plan), and the run that fetches
them exactly.

The plan is a weighted set cover over three endpoints: per lesson and per user (each returns every pair of its
scope in the window, and costs ceil(n / pageSize) + 1 requests, the last a confirming empty page) or per pair
(2). Only the pairs marked `refetch` need covering, but a grouped request's cost counts every pair of its scope.
Greedy in buckets: each round takes every lesson and user whose cost per uncovered pair is within 25% of the
best, while that beats 2; ratios only grow, so rounds are few (~30 at most), each a pair of counts over the
pairs' codes with no Python loop over pairs.

The run fetches the plan concurrently, then checks for page drift with two listings of the active lessons
bracketing each pass and fetches again what it may have hit: docs/design.md, "Answers: drift".
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
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


def _distinct_pairs(changed: pa.Table) -> tuple[_Pairs, _Pairs, dict[str, pa.Array]]:
    """Distinct pairs as int32 codes (cheap to count and filter at a million rows): all of them, and those
    to cover (a pair is covered when any of its rows has refetch true), plus the id of each code."""
    missing = {"user_id", "lesson_id"} - set(changed.column_names)
    if missing:
        raise ValueError(f"changed pairs need columns user_id and lesson_id; missing {sorted(missing)}")
    names, codes = {}, {}
    for column in ("user_id", "lesson_id"):
        encoded = _encoded(changed.column(column))
        if encoded.null_count:
            raise ValueError("changed pairs contain a null user_id or lesson_id; they cannot address answers")
        codes[column] = np.concatenate(
            [chunk.indices.to_numpy(zero_copy_only=False).astype(np.int32) for chunk in encoded.chunks]
            or [np.empty(0, np.int32)]
        )
        names[column] = (
            encoded.chunks[0].dictionary.cast(pa.string()) if encoded.num_chunks else pa.array([], pa.string())
        )
    pairs = _Pairs(codes["user_id"], codes["lesson_id"])
    every = pairs.distinct(len(names["lesson_id"]))
    if REFETCH not in changed.column_names:
        return every, every, names
    flags = changed.column(REFETCH)
    if flags.null_count:
        raise ValueError(f"the {REFETCH} column holds nulls; say true or false for every pair")
    wanted = pairs.where(flags.cast(pa.bool_()).to_numpy(zero_copy_only=False)).distinct(len(names["lesson_id"]))
    return every, wanted, names


@dataclass(frozen=True)
class _Pairs:
    """(user, lesson) pairs as the codes of their ids: dense (0 to the number of distinct ids), so that a count
    per id is a bincount and a pair one int64. Plain numpy, not Arrow's group-by: that one runs on Acero, whose
    import brings pyarrow.dataset (~40 MiB of RSS) into the sync's process for good."""

    user_id: np.ndarray
    lesson_id: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.user_id)

    def column(self, name: str) -> np.ndarray:
        return self.user_id if name == "user_id" else self.lesson_id

    def where(self, mask: np.ndarray) -> _Pairs:
        return _Pairs(self.user_id[mask], self.lesson_id[mask])

    def distinct(self, lessons: int) -> _Pairs:
        """Each pair once, in the order of its first appearance."""
        key = self.user_id.astype(np.int64) * max(lessons, 1) + self.lesson_id
        _, first = np.unique(key, return_index=True)
        return self.where(np.sort(first))


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


def _ratios(remaining: _Pairs, column: str, totals: np.ndarray, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids (codes) of `column` with a still-uncovered pair, and per id its request cost (from all its pairs,
    `totals`) over its uncovered pairs."""
    uncovered = np.bincount(remaining.column(column), minlength=len(totals))
    ids = np.flatnonzero(uncovered)
    cost = np.ceil(totals[ids] / float(page_size)) + 1.0
    return ids, cost / uncovered[ids]


def plan_answer_requests(changed: pa.Table, page_size: int) -> AnswerPlan:
    """The bucketed-greedy plan covering every (user_id, lesson_id) of `changed` (duplicates allowed), or
    only those with `refetch` true when that column is present (the others still count in request costs)."""
    every, remaining, names = _distinct_pairs(changed)
    totals = {c: np.bincount(every.column(c), minlength=len(names[c])) for c in ("lesson_id", "user_id")}
    streams = {"lesson_id": "answers_by_lesson", "user_id": "answers_by_user"}
    grouped: list[PlannedRequest] = []
    while remaining.num_rows:
        ratios = {c: _ratios(remaining, c, totals[c], page_size) for c in streams}
        best = min(float(ratio.min()) for _, ratio in ratios.values() if len(ratio))
        if best >= PAIR_COST:
            break
        limit = min(best * BUCKET, PAIR_COST - 1e-9)
        for column, (ids, ratio) in ratios.items():
            chosen = ids[ratio <= limit]
            if len(chosen) == 0:
                continue
            values = names[column].take(pa.array(chosen))
            for value, covers in zip(values.to_pylist(), totals[column][chosen].tolist(), strict=True):
                grouped.append(PlannedRequest(streams[column], ((column, value),), covers))
            covered = np.zeros(len(totals[column]), dtype=bool)
            covered[chosen] = True
            remaining = remaining.where(~covered[remaining.column(column)])
    grouped.sort(key=lambda r: -r.covers)
    leftovers = pa.table({c: names[c].take(pa.array(remaining.column(c))) for c in ("user_id", "lesson_id")})
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
    pairs = recent.select(["user_id", "lesson_id"]).drop_null()  # a pair without an id addresses no listing row
    return _distinct_pairs(pairs)[0].num_rows if pairs.num_rows else 0


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
