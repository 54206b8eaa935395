"""What a stream is, as data (in the spirit of dlt's REST API source, where a resource is one dict entry), and the
registry every other part derives from: the endpoints the client requests, the tables the warehouse creates, the
Dagster assets, groups, deps and checks, the runner's order of work, the docs, sources.yml and the verification.

- `StreamSpec`: one endpoint listing: path template, fixed query parameters, record model, pager kind, the table its
  records fill and the child rows each page yields. Pager kinds (pipeline/source/paging.py): "records" pages until
  a short page; "answers" pages over active-lesson records until the caller-known count is covered, then confirms
  with an empty page; "single" is one unpaginated request (the spec gives those operations no pagination).
- `SyncStream`: one stream a run syncs: its endpoints, the tables it owns (their keys, cursor and descriptions are
  their TableSpecs'), its kind, its Dagster group and deps, the links its tables' checks verify.
- `register` adds declarations to `SYNC_STREAMS` and fills `STREAMS` (endpoints by name), `STREAM_TABLES`, and
  tables.py's `TABLES` and `BUILDS` from them; today's streams are declared in declarations.py
  (docs/adding-a-stream.md walks through adding one).

Stream kinds:
  snapshot     pulled whole; the rows that vanished from a complete pull are marked deleted
  incremental  read by `updatedSince` from its cursor (pipeline/raw/windows.py); commits first when a planned
               stream is planned from it (the critical path)
  planned      requests planned from a parent stream's records, committed or still in the parent's load
               (`Planned`: the parent, the planner's name in pipeline/raw/planners.py); its own cursor, capped by
               the parent's cursor of the records it was planned from
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pipeline.contract import models as m
from pipeline.contract.tables import BUILDS, TABLES, TABLES_WITHOUT_STREAM, ChildRow, ChildTable, RecordTable, TableSpec

PagerKind = Literal["records", "answers", "single"]
StreamKind = Literal["snapshot", "incremental", "planned"]
Expand = Callable[[Sequence[Any], Mapping[str, str]], list[ChildRow]]  # (page records, path values) -> rows

ANSWER_PARAMS = {"includeArchived": "true", "includeEntryQuiz": "true"}  # keep every attempt, both quizzes
SNAPSHOT_PARAMS = {"includeDisabled": "true"}
# How far from `updatedSince` a platform may draw its line: the spec shows neither the format nor whether it is
# inclusive, so an exclusive `>` or a comparison in whole seconds must lose nothing (pipeline/raw/windows.py, A3).
UPDATED_SINCE_RESOLUTION = timedelta(seconds=1)
# The most parent rows a planned stream is planned from while the parent's load commits (a larger load commits
# first: that commit sorts and stages millions of rows within DuckDB's memory limit, and the planned fetch's buffers
# and decode worker would add up with it), and the largest plan whose first load is inserted while fetched.
OVERLAP_MAX_ROWS = 500_000


@dataclass(frozen=True)
class SubStream:
    """For each record of the parent stream, run `stream` with `placeholder` = the record's `column`."""

    stream: str
    placeholder: str
    column: str


@dataclass(frozen=True)
class StreamSpec:
    """One endpoint listing (what the client requests)."""

    name: str
    path: str  # template; placeholders are percent-encoded when filled
    model: type[m.ApiModel]
    table: str  # table of the records themselves
    pager: PagerKind
    params: Mapping[str, str] = field(default_factory=dict)
    incremental: bool = False  # accepts updatedSince = window start
    children: tuple[tuple[str, Expand], ...] = ()  # (child table, rows derived from a page)
    substream: SubStream | None = None
    description: str = ""

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables a page of this listing yields batches of: its records', then its children's."""
        return (self.table, *(child for child, _ in self.children))

    def where(self) -> str:
        """The request as the docs show it: `GET /v1/groups?includeDisabled=true`."""
        query = "&".join(f"{name}={value}" for name, value in self.params.items())
        return f"GET {self.path}" + (f"?{query}" if query else "")


@dataclass(frozen=True)
class Link:
    """Every live row of lms.<child> has its lms.<parent> row (a check of the child, named for the parent)."""

    child: str
    parent: str
    on: dict[str, str]  # child column -> parent column

    @property
    def check_name(self) -> str:
        return f"links_to_{self.parent}"


@dataclass(frozen=True)
class Planned:
    """How a planned stream's requests are made: from the records of stream `parent` (an incremental stream), by the
    planner named `planner` (pipeline/raw/planners.py). A parent load of at most `overlap_max_rows` rows plans it
    before that load commits (the fetch runs while it commits); a larger one commits first."""

    parent: str
    planner: str
    overlap_max_rows: int = OVERLAP_MAX_ROWS


@dataclass(frozen=True)
class SyncStream:
    """One stream a run syncs, declared once. `endpoints[0]` is its listing (named as the stream, unless planned); the
    others are what it runs per parent record (a `SubStream`) or what its planner chooses from. `tables[0]` is the
    table of its own records, the others its child tables and its sub-listing's; each TableSpec holds the table's
    key, cursor and description. `deps`: table -> the tables its Dagster asset depends on. `links`: what its
    tables' link checks verify. `early_insert`: a planned stream whose first load goes into its empty tables part
    by part while it is fetched (its plan no larger than `overlap_max_rows`)."""

    name: str
    kind: StreamKind
    endpoints: tuple[StreamSpec, ...]
    tables: tuple[RecordTable | ChildTable, ...]
    group: str  # the Dagster group of its tables' assets (the domain)
    deps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    links: tuple[Link, ...] = ()
    planned: Planned | None = None
    early_insert: bool = False

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise ValueError(f"stream {self.name}: {problem} (docs/adding-a-stream.md)")

    @property
    def table(self) -> str:
        """The table of the stream's own records."""
        return self.tables[0].spec.name

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(build.spec.name for build in self.tables)

    @property
    def specs(self) -> tuple[TableSpec, ...]:
        return tuple(build.spec for build in self.tables)

    def _problem(self) -> str | None:
        if self.kind not in ("snapshot", "incremental", "planned"):
            return f"kind {self.kind!r} is not one of snapshot, incremental, planned"
        if not self.endpoints or not self.tables:
            return "declares no endpoint or no table"
        if (self.kind == "planned") != (self.planned is not None):
            return "a planned stream, and only it, names its parent and planner (planned=Planned(...))"
        if self.early_insert and self.kind != "planned":
            return "early_insert is for a planned stream (the one fetch the runner waits for before it ends)"
        if self.kind != "planned" and self.endpoints[0].name != self.name:
            return f"its listing endpoint is named {self.endpoints[0].name!r}; name it as the stream"
        table_kind = "snapshot" if self.kind == "snapshot" else "incremental"
        wrong = [spec.name for spec in self.specs if spec.kind != table_kind]
        if wrong:
            return f"a {self.kind} stream fills {table_kind} tables; {wrong} are not"
        if self.kind != "snapshot" and (self.tables[0].spec.cursor_field is None or not self.endpoints[0].incremental):
            return f"a {self.kind} stream's table has a cursor field and its endpoints take updatedSince"
        foreign = sorted({t for e in self.endpoints for t in e.tables} - set(self.table_names))
        if foreign:
            return f"its endpoints fill tables {foreign} it does not own; add their builds to `tables`"
        if len(set(self.table_names)) != len(self.tables):
            return f"declares a table twice in {list(self.table_names)}"
        unowned = sorted(({link.child for link in self.links} | set(self.deps)) - set(self.table_names))
        if unowned:
            return f"links or deps name tables {unowned} it does not own"
        return None


# The registries (filled by `register`; declarations.py registers today's streams when the package is imported).
SYNC_STREAMS: dict[str, SyncStream] = {}  # every stream a run syncs, by name, in declaration order
STREAMS: dict[str, StreamSpec] = {}  # every endpoint listing, by name (the client's requests)
STREAM_TABLES: dict[str, tuple[str, ...]] = {}  # every raw table, by the stream that fills it


def register(*streams: SyncStream) -> None:
    """Add `streams` to the registry; ValueError naming the clash when a stream, endpoint or table name is taken,
    or when what a stream refers to (its parent, its links' and deps' tables) is not declared. The registries change
    in place: streams are declared at import (declarations.py) or by a test or tool before it runs anything."""
    for stream in streams:
        problem = _clash(stream)
        if problem:
            raise ValueError(f"stream {stream.name}: {problem} (docs/adding-a-stream.md)")
        SYNC_STREAMS[stream.name] = stream
        try:
            _derive()
            problem = _dangling(stream)
        except BaseException:
            unregister(stream.name)
            raise
        if problem:
            unregister(stream.name)
            raise ValueError(f"stream {stream.name}: {problem} (docs/adding-a-stream.md)")


def unregister(name: str) -> None:
    """Remove the stream `name` (and its endpoints and tables) from the registry."""
    SYNC_STREAMS.pop(name, None)
    _derive()


@contextmanager
def registered(*streams: SyncStream) -> Iterator[None]:
    """`streams` declared for the block only (tests, tools); the registry is as before after it."""
    done: list[str] = []
    try:
        for stream in streams:
            register(stream)
            done.append(stream.name)
        yield
    finally:
        for name in reversed(done):
            unregister(name)


def stream_of(table: str) -> SyncStream | None:
    """The stream that fills `table`, None for a table no stream fills."""
    return next((s for s in SYNC_STREAMS.values() if table in s.table_names), None)


def planned_from(parent: str) -> list[SyncStream]:
    """The planned streams whose requests are planned from the records of stream `parent`."""
    return [s for s in SYNC_STREAMS.values() if s.planned is not None and s.planned.parent == parent]


def stream_tables() -> tuple[str, ...]:
    """Every table a stream fills (the raw tables of `lms_raw`), in declaration order."""
    return tuple(table for tables in STREAM_TABLES.values() for table in tables)


def stream_links() -> tuple[Link, ...]:
    """Every link the raw-table checks verify, from every declaration."""
    return tuple(link for stream in SYNC_STREAMS.values() for link in stream.links)


def _clash(stream: SyncStream) -> str | None:
    if stream.name in SYNC_STREAMS:
        return "a stream of that name is declared already"
    taken = [e.name for e in stream.endpoints if e.name in STREAMS]
    if taken:
        return f"endpoints {taken} are declared by another stream already"
    tables = [t for t in stream.table_names if t in TABLES]
    if tables:
        return f"tables {tables} are declared already (filled by another stream, or by no stream)"
    return None


def _dangling(stream: SyncStream) -> str | None:
    committed_before = set(stream.table_names)  # what a link check may count on when the stream commits
    if stream.planned is not None:
        parent = SYNC_STREAMS.get(stream.planned.parent)
        if parent is None or parent.kind != "incremental":
            return f"it is planned from {stream.planned.parent!r}, which is not a declared incremental stream"
        committed_before |= set(parent.table_names)
    outside = sorted({link.parent for link in stream.links} - committed_before)
    if outside:
        return (
            f"its links name tables {outside}, which are not its own nor its parent's: their check runs when it "
            "commits, and another stream may commit after it"
        )
    missing = sorted({d for deps in stream.deps.values() for d in deps} - set(TABLES))
    if missing:
        return f"its deps name tables {missing} that no declaration has"
    return None


def _derive() -> None:
    """STREAMS, STREAM_TABLES, TABLES and BUILDS from SYNC_STREAMS, in place (every importer holds these dicts)."""
    streams = list(SYNC_STREAMS.values())
    _refill(STREAMS, {e.name: e for s in streams for e in s.endpoints})
    _refill(STREAM_TABLES, {s.name: s.table_names for s in streams})
    _refill(BUILDS, {b.spec.name: b for s in streams for b in s.tables})
    _refill(TABLES, {**{name: b.spec for name, b in BUILDS.items()}, **{t.name: t for t in TABLES_WITHOUT_STREAM}})


def _refill(registry: dict[str, Any], entries: dict[str, Any]) -> None:
    registry.clear()
    registry.update(entries)
