"""Fewest answer requests for a set of changed active lessons (user_id, lesson_id pairs).

Three endpoints can fetch a pair's answers: per lesson (/v1/lessons/{L}/answers), per user
(/v1/users/{U}/answers), or per pair (/v1/users/{U}/lessons/{L}/answers). A per-lesson or per-user request
returns every changed pair of that lesson/user (updatedSince = window start), and costs its pages plus
one confirming empty page: ceil(n / pageSize) + 1. A per-pair request costs 2 (one page, one confirm).

Only some pairs of the window may need their answers (the others' versions are already in the
warehouse): a `refetch` boolean column marks the pairs to cover, while the cost of a grouped request
still counts EVERY pair of the window in its scope (the API returns them all, changed or not).

This is weighted set cover; we run greedy in buckets: each round takes every lesson and user whose cost
per still-uncovered pair is within 25% of the best, while that beats the per-pair cost of 2. Ratios only
grow as pairs get covered, so rounds are few (log_1.25 of the ratio range, ~30 at most), and each round
is a pair of Arrow group-bys: no Python loop over pairs, fine for a million changed rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.source.pagination import answer_request_cost

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
        return len(self.grouped) + self.pairs.num_rows

    def estimated_cost(self, page_size: int) -> int:
        return sum(answer_request_cost(r.covers, page_size) for r in self.grouped) + PAIR_COST * self.pairs.num_rows

    def requests(self) -> Iterator[PlannedRequest]:
        yield from self.grouped
        for batch in self.pairs.to_batches(max_chunksize=10_000):  # lazily: never all pairs as objects
            for user_id, lesson_id in zip(batch.column("user_id").to_pylist(),
                                          batch.column("lesson_id").to_pylist(), strict=True):
                yield PlannedRequest("answers_by_user_lesson",
                                     (("user_id", user_id), ("lesson_id", lesson_id)), 1)


REFETCH = "refetch"  # optional boolean column of the planner's input: cover this pair (default: every pair)


def _distinct_pairs(changed: pa.Table) -> tuple[pa.Table, pa.Table, dict[str, pa.Array]]:
    """Distinct pairs as int32 codes (cheap to group and filter at a million rows): all of them, and those
    to cover (a pair is covered when any of its rows has refetch true), plus the id of each code."""
    missing = {"user_id", "lesson_id"} - set(changed.column_names)
    if missing:
        raise ValueError(f"changed pairs need columns user_id and lesson_id; missing {sorted(missing)}")
    names, codes = {}, {}
    for column in ("user_id", "lesson_id"):
        values = changed.column(column).cast(pa.string())
        if values.null_count:
            raise ValueError("changed pairs contain a null user_id or lesson_id; they cannot address answers")
        encoded = pc.dictionary_encode(values)  # chunk by chunk, one dictionary for all: no copy of the ids
        codes[column] = pa.chunked_array([chunk.indices for chunk in encoded.chunks], type=pa.int32())
        names[column] = encoded.chunks[0].dictionary if encoded.num_chunks else pa.array([], pa.string())
    pairs = pa.table(codes)
    every = pairs.group_by(["user_id", "lesson_id"]).aggregate([])
    if REFETCH not in changed.column_names:
        return every, every, names
    flags = changed.column(REFETCH)
    if flags.null_count:
        raise ValueError(f"the {REFETCH} column holds nulls; say true or false for every pair")
    wanted = pairs.filter(flags.cast(pa.bool_())).group_by(["user_id", "lesson_id"]).aggregate([])
    return every, wanted, names


def _ratios(remaining: pa.Table, column: str, totals: pa.Table, page_size: int) -> pa.Table:
    """Per value of `column`: its request cost (from all its pairs) over its still-uncovered pairs."""
    uncovered = remaining.group_by(column).aggregate([([], "count_all")])
    joined = uncovered.join(totals, column)
    covers = joined.column("total")
    cost = pc.add(pc.ceil(pc.divide(pc.cast(covers, pa.float64()), float(page_size))), 1.0)
    ratio = pc.divide(cost, pc.cast(joined.column("count_all"), pa.float64()))
    return pa.table({column: joined.column(column), "covers": covers, "ratio": ratio})


def plan_answer_requests(changed: pa.Table, page_size: int) -> AnswerPlan:
    """The bucketed-greedy plan covering every (user_id, lesson_id) of `changed` (duplicates allowed), or
    only those with `refetch` true when that column is present (the others still count in request costs)."""
    every, remaining, names = _distinct_pairs(changed)
    totals = {c: every.group_by(c).aggregate([([], "count_all")]).rename_columns([c, "total"])
              for c in ("lesson_id", "user_id")}
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
