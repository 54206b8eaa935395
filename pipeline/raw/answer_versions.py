"""Which active-lesson versions the warehouse holds the answers of, so an incremental run asks only for the answers
of active lessons whose version changed.

Answer listings filter by active-lesson record (`updatedSince` against its lastDate), so an answer change is only
ever visible through its active lesson's lastDate: while the stored version equals it, asking again returns
nothing new. `lms.answers_synced_versions` (owner_id, user_id, lesson_id -> last_date) holds the lastDate each
active lesson had when its answers were planned; it is one more table of the answers load, so it commits with them
and `lessonsync rebuild` restores it (docs/design.md, "Answer versions").

`LESSONSYNC_ANSWERS_REFETCH`: "changed" (default) plans the window's active lessons whose version differs,
"window" every one; full refreshes and backfills always refetch their window. Every mode records what it fetched.
A full sync's window is spilled to Parquet (WindowLessons), never held through the fetch.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.contract.columns import TIMESTAMP
from pipeline.contract.tables import ANSWER_VERSIONS_TABLE, TableSpec
from pipeline.raw.windows import Window
from pipeline.warehouse import Load, Warehouse, check_parts

VERSIONS = TableSpec(
    name=ANSWER_VERSIONS_TABLE,
    schema=pa.schema(
        [
            pa.field("owner_id", pa.string(), nullable=False),
            pa.field("user_id", pa.string(), nullable=False),
            pa.field("lesson_id", pa.string(), nullable=False),
            pa.field("last_date", TIMESTAMP),
        ]
    ),
    key=("owner_id", "user_id", "lesson_id"),
    kind="incremental",
    cursor_field="last_date",
    description="Sync state: the lastDate of each active lesson whose answers the warehouse holds "
    "(answers are asked again only when it changes).",
)

_COLUMNS = "a.owner_id, a.user_id, a.lesson_id, a.last_date"
PLANNER_COLUMNS = ("user_id", "lesson_id", "last_date", "refetch")
VERSION_BATCH_ROWS = 65_536  # versions streamed from the spilled window into the load this many at a time


def window_query(window: Window, *, only_changed: bool, uncommitted: bool = False) -> tuple[str, dict[str, object]]:
    """SQL (and its parameters) of every active lesson of the window as the warehouse knows it right after the
    active-lessons sweep: owner_id, user_id, lesson_id, last_date and `refetch` (true: its answers must be
    fetched). The planner needs ALL of them (what a per-lesson or per-user request returns) and covers those
    with refetch.

    `uncommitted`: the sweep's load is not committed yet; its lake parts (parameter $files) count as committed,
    the newest lastDate of a key winning (as the upsert keeps it), so the answers can be planned, and fetched,
    while it commits. Where the upsert would keep another lastDate (a NULL one), the plan only differs on the
    safe side: a lesson counted in a request's scope too many, or a version recorded that the warehouse does
    not hold, so its answers are asked again next run."""
    params: dict[str, object] = {} if window.since is None else {"since": window.since}
    where = "" if window.since is None else "WHERE a.last_date >= $since"
    lessons = "lms.active_lessons"
    if uncommitted:
        # Each side filtered by the window before the grouping, not only after it: a key whose newest lastDate is in
        # the window keeps it (what the filter drops is older or NULL, which max() would not pick), and the
        # grouping then takes the window's rows instead of every active lesson.
        inside = "" if window.since is None else "WHERE last_date >= $since"
        lessons = (
            "(SELECT owner_id, user_id, lesson_id, max(last_date) AS last_date FROM "
            f"(SELECT owner_id, user_id, lesson_id, last_date FROM lms.active_lessons {inside} UNION ALL "
            f"SELECT owner_id, user_id, lesson_id, last_date FROM read_parquet($files) {inside}) "
            "GROUP BY owner_id, user_id, lesson_id)"
        )
    if only_changed:
        # No stored version at all (v.owner_id NULL) means never fetched, whatever lastDate holds: a NULL
        # lastDate must not look like the NULL of a missing version row.
        return (
            f"SELECT {_COLUMNS}, v.owner_id IS NULL OR v.last_date IS DISTINCT FROM a.last_date AS refetch "
            f"FROM {lessons} a LEFT JOIN lms.{VERSIONS.name} v "
            f"USING (owner_id, user_id, lesson_id) {where}"
        ), params
    return f"SELECT {_COLUMNS}, true AS refetch FROM {lessons} a {where}", params


@dataclass(frozen=True)
class WindowLessons:
    """The window's active lessons (window_query), spilled by DuckDB to one Parquet file in the warehouse's temp
    directory: never held as Python or Arrow strings through the fetch. The planner reads back only the ids it
    needs, dictionary-encoded (int32 codes plus each distinct id once), and the versions to record are streamed
    from the file into the load in batches once the fetch is over."""

    path: Path
    window: Window

    def planner_input(self) -> pa.Table:
        """user_id and lesson_id (dictionary-encoded: the planner works on their codes), last_date, refetch."""
        # Row group by row group, in this thread, without pre-buffering: the reader's scratch then stays one row
        # group's (read whole, a large window leaves several times its columns' size resident).
        window = pq.ParquetFile(self.path, read_dictionary=["user_id", "lesson_id"], pre_buffer=False)
        groups = [
            window.read_row_group(group, columns=list(PLANNER_COLUMNS), use_threads=False)
            for group in range(window.num_row_groups)
        ]
        return pa.concat_tables(groups) if groups else window.schema_arrow.empty_table().select(list(PLANNER_COLUMNS))

    def counts(self) -> tuple[int, int]:
        """Active lessons in the window, and those of them whose answers were asked (refetch)."""
        # ParquetFile, not pq.read_table: that one reads through pyarrow.dataset, ~40 MiB of RSS once imported
        refetch = pq.ParquetFile(self.path).read(columns=["refetch"], use_threads=False).column("refetch")
        return len(refetch), pc.sum(refetch).as_py() or 0

    def fetched_versions(self) -> Iterator[pa.RecordBatch]:
        """The rows of VERSIONS to record for the active lessons whose answers this run fetched, in batches
        (a window with an end records only versions before it: rows at or after the end are not the window's
        to keep)."""
        for batch in pq.ParquetFile(self.path).iter_batches(VERSION_BATCH_ROWS, use_threads=False):
            fetched = versions_of(batch, self.window)
            if fetched.num_rows:
                yield fetched


def versions_of(window_lessons: pa.RecordBatch, window: Window) -> pa.RecordBatch:
    """Of some rows of the window (window_query's columns): those to record in VERSIONS, in its schema."""
    keep = window_lessons.column("refetch")
    if window.until is not None:
        before_end = pc.less(window_lessons.column("last_date"), pa.scalar(window.until, TIMESTAMP))
        keep = pc.and_kleene(keep, pc.fill_null(before_end, False))
    fetched = window_lessons.filter(keep)
    return pa.RecordBatch.from_arrays(
        [fetched.column(f.name).cast(f.type) for f in VERSIONS.schema], schema=VERSIONS.schema
    )


@contextmanager
def spill_window_active_lessons(
    wh: Warehouse, window: Window, *, only_changed: bool, loading: Load | None = None
) -> Iterator[WindowLessons]:
    """The window's active lessons written by DuckDB (streaming, within its memory limit) to a Parquet file in
    the warehouse's temp directory, removed when the block ends. `loading`: the sweep's active-lessons load,
    in the lake but not committed yet (window_query's `uncommitted`)."""
    temp = Path(str(wh.connection_settings.duckdb_config(wh.path)["temp_directory"]))
    temp.mkdir(parents=True, exist_ok=True)
    parts = () if loading is None else loading.parts_written("active_lessons")
    query, params = window_query(window, only_changed=only_changed, uncommitted=bool(parts))
    with tempfile.TemporaryDirectory(prefix="answers-window-", dir=temp) as spill:
        path = Path(spill) / "window.parquet"
        with wh.connect(read_only=True) as conn:
            if parts:
                assert loading is not None
                params["files"] = check_parts(wh.lake, parts, f"the uncommitted load {loading.load_id}", conn)
            conn.sql(query, params=params or None).to_parquet(str(path))
        yield WindowLessons(path, window)
