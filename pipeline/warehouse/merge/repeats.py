"""A complete snapshot that repeats the last one row for row, applied without comparing its rows.

Snapshots (groups and their users, the lesson catalogue, sessions, categories) are pulled whole every run, and on
most nights nothing in them changed. The ordinary apply (staging.py) would read every row, join it with the
table, find every row `same` and none vanished, and write nothing (a load leaves its unchanged rows alone): most
of a quiet run's commit time spent to change no row. A load is applied here instead when all of these hold for
every table it writes:

1. the table is a complete snapshot of this load, with a content digest (loading/content.py), and every child link of
   the load joins two of its tables (so replacing children has nothing to do either);
2. the newest load that wrote the table (lms._load_runs) wrote it as a complete snapshot with the same digest and
   no stale row: so the table's live rows are that load's rows deduped, and this load's rows are the same multiset;
3. no key of this load's parts has two different rows (then which copy wins the dedupe does not depend on the
   order the parts were written in), and the table has as many live rows as the load has keys (nothing outside
   a load, such as a table dropped and recreated, changed it since). When the previous load kept every row it
   fetched, its rows, and so this load's, have no key twice; when it was itself a repeat, it recorded how many keys
   its rows hold, none with two different rows (`keys` in lms._load_runs), which holds for the same rows again:
   either way the parts are not read.

Then the table already holds exactly the deduped rows the ordinary apply would classify `same`, and it would
change no row: no row is written here either. Counts, cursor, load record and manifest are the same as the
ordinary apply's (the record is what says the load saw every live row: lms._snapshot_seen); a replay or rebuild
that takes the ordinary path produces the same rows. Its manifest names the parts of the load it repeats, not
its own (loading/commit.py): the lake keeps one copy of rows that did not change."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.tabledef import TableDef
from pipeline.warehouse.lake.manifest import LoadPlan, TableLoad
from pipeline.warehouse.merge.checks import live_rows
from pipeline.warehouse.merge.state import VERIFIED_KEYS, newest_loads
from pipeline.warehouse.results import TableLoadStats


@dataclass(frozen=True)
class Repeat:
    of: int  # the seq of the load repeated
    live: dict[str, int]  # per table, its live rows: every one of them seen again unchanged


def repeated_load(
    conn: duckdb.DuckDBPyConnection, plan: LoadPlan, catalog: dict[str, TableDef], files: dict[str, list[str]]
) -> Repeat | None:
    """What load `plan` repeats (conditions 1-3 above), or None: apply it the ordinary way.
    `files`: each table's parts as read_parquet takes them (lake.check_parts)."""
    if not _is_whole_snapshot(plan, catalog):
        return None
    previous = newest_loads(conn, files)
    seqs, live = set(), {}
    for table in plan.tables:
        written = previous.get(table.name)
        if (
            written is None
            or not written.complete
            or written.content != table.content
            or written.counts.get("stale", 0)
        ):
            return None
        seqs.add(written.seq)
        keys = _keys_of(conn, table, files[table.name], written.counts)
        live[table.name] = live_rows(conn, catalog[table.name])
        if keys is None or keys != live[table.name]:
            return None
    return Repeat(max(seqs), live)


def repeated_stats(plan: LoadPlan, repeat: Repeat) -> dict[str, TableLoadStats]:
    """The counts of a repeated load, which writes no row: every live row seen again unchanged."""
    return {
        table.name: TableLoadStats(fetched=sum(part.rows for part in table.parts), unchanged=repeat.live[table.name])
        for table in plan.tables
    }


def _is_whole_snapshot(plan: LoadPlan, catalog: dict[str, TableDef]) -> bool:
    names = {table.name for table in plan.tables}
    return (
        bool(names)
        and not plan.drop_before
        and names == set(plan.complete_snapshots)
        and all(
            table.content and table.kind == "snapshot" and table.name in catalog and catalog[table.name].has_deleted_at
            for table in plan.tables
        )
        and all(link.child in names and link.parent in names for link in plan.children)
    )


def _keys_of(
    conn: duckdb.DuckDBPyConnection, table: TableLoad, files: list[str], previous: dict[str, int]
) -> int | None:
    """How many keys the load's parts hold, or None if some key has two different rows. The previous load wrote
    the same rows (the same digest): if it kept every row it fetched, no key occurs twice and the parts need no
    read; else (users listed once per group they belong to) the parts are grouped by key."""
    fetched = sum(part.rows for part in table.parts)
    kept = sum(previous.get(change, 0) for change in ("inserted", "updated", "unchanged", "stale"))
    if previous.get("fetched") == fetched:
        if fetched == kept:
            return fetched
        if isinstance(verified := previous.get(VERIFIED_KEYS), int):
            return verified
    if not files:
        return 0
    key = ", ".join(q(k) for k in table.key)
    keys, conflicting = conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE versions > 1) FROM ("
        f"SELECT {key}, count(*) AS versions FROM (SELECT DISTINCT * FROM {table.scan()}) GROUP BY ALL)",
        {"files": files},
    ).fetchall()[0]
    return None if conflicting else int(keys)
