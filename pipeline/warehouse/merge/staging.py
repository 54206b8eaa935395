"""Staging one table of one load: read its Parquet parts, cast to the warehouse types, keep one row per
key (greatest cursor field, or greatest by the spec's order_by; ties -> last written), and classify each
row against the warehouse:

  insert   key not in the table
  stale    the table's copy has a newer cursor field (a slower, older fetch committing late), or with
           order_by, the table's copy is ordered after this row: not applied
  rewrite  a list column changed (deleted and re-inserted: DuckDB rewrites a changed list that way anyway)
  update   other data changed, or the row comes back after being marked deleted
  same     identical data: not written (last_loaded_at too stays; a complete snapshot's record says it saw
           every live row: lms._snapshot_seen)
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.connection import memory_limit_bytes, repeats_any
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.duck.tabledef import DELETED_AT, FIRST_LOADED_AT, META_COLUMNS, TableDef
from pipeline.warehouse.errors import SchemaError
from pipeline.warehouse.lake.manifest import ChildLink, TableLoad

CHANGES = ("insert", "stale", "rewrite", "update", "same")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str  # temp table holding the classified rows
    load: TableLoad
    target: TableDef
    target_was_empty: bool  # then every row is an insert and the upsert can take the bulk path
    # A first load (upsert.insert_first_load) went straight into its empty table and has no temp table: the
    # table's rows are this load's rows, all inserts. Then `inserted` is their count, else None.
    inserted: int | None = None

    @property
    def inserted_directly(self) -> bool:
        return self.inserted is not None

    @property
    def relation(self) -> str:
        """SQL relation of the staged rows with their `_change`, for the statements that read a stage."""
        if self.inserted_directly:
            return f"(SELECT *, 'insert' AS _change FROM {table_ref(self.target.name)})"
        return q(self.name)

    @property
    def carried(self) -> tuple[str, ...]:
        """Target columns a delete + insert must carry over from the old row: first_loaded_at and
        columns that this load's spec does not have (kept from older loads, never dropped)."""
        skip = set(self.load.columns) | {c for c in META_COLUMNS if c != FIRST_LOADED_AT}
        return tuple(c for c in self.target.column_names if c not in skip)


def old_value_column(column: str) -> str:
    """The stage's column holding the table's old value of a carried column (Stage.carried)."""
    return f"_old_{column}"


def is_list_type(type_sql: str) -> bool:
    return "[]" in type_sql or type_sql.startswith("MAP(")


def target_is_empty(conn: duckdb.DuckDBPyConnection, target: TableDef) -> bool:
    return bool(conn.execute(f"SELECT count(*) = 0 FROM {table_ref(target.name)}").fetchall()[0][0])


def create_stage(
    conn: duckdb.DuckDBPyConnection,
    load: TableLoad,
    target: TableDef,
    files: list[str],
    target_was_empty: bool,
    linked: Collection[str] = (),
) -> Stage:
    """`target_was_empty`: target_is_empty(conn, target), as the caller found it. `linked`: the columns that tie
    the table's rows to a parent's or a child's (ChildLink.on), kept in every staged row with the key."""
    stage = Stage(f"_stage_{load.name}", load, target, target_was_empty)
    drop_stage(conn, stage)
    with values_must_fit(load), duplicate_keys_of(conn, load, target, files) as duplicates:
        # the load's rows first, on their own: the join below then knows they are the small side
        conn.execute(
            f"CREATE TEMP TABLE {q(_loaded(stage))} AS {deduped_sql(load, target, duplicates)}", {"files": files}
        )
    loaded = f"temp.{q(_loaded(stage))}"
    by_row_id = _few_of_many(conn, stage, loaded)
    params = value_range(conn, loaded, load.key[0])
    if stage.target_was_empty:
        conn.execute(f"CREATE TEMP TABLE {q(stage.name)} AS {_matched_sql(stage, by_row_id=by_row_id)}", params)
    else:
        # The join and the sort into storage order (fastest in-place updates) are two statements: a sort fed by
        # a hash join in one statement does not spill and ran out of memory (DuckDB: "if multiple blocking
        # operators appear in the same query, DuckDB may still throw an out-of-memory exception"); each alone does.
        kept = {*load.key, *linked}
        for number, part in enumerate(key_slices(conn, loaded, load.key[0])):
            matched = _narrowed(_matched_sql(stage, by_row_id=by_row_id, within=part), stage, kept)
            into = (
                f"CREATE TEMP TABLE {q(_matched(stage))} AS"
                if number == 0
                else f"INSERT INTO temp.{q(_matched(stage))}"
            )
            conn.execute(f"{into} {matched}", {**params, **part.params})
        conn.execute(
            f"CREATE TEMP TABLE {q(stage.name)} AS SELECT * FROM temp.{q(_matched(stage))} ORDER BY _rowid NULLS LAST"
        )
    drop_stage(conn, stage, keep_stage=True)
    return stage


def _narrowed(matched: str, stage: Stage, kept: Collection[str]) -> str:
    """`matched` (_matched_sql: the loaded columns, `_change`, `_rowid`, the carried `_old_` columns) with every
    column but the key, the linked columns, `_change` and `_rowid` NULL in a `same` or `stale` row. Nothing reads
    more of those rows than that (the touch goes by row id, staleness and vanished children by key and link), and a
    full refresh stages every row of its table as `same`: kept whole, its stage was as wide as the table and sorting
    it into storage order took as long as classifying it."""
    dropped = [c for c in stage.load.columns if c not in kept] + [old_value_column(c) for c in stage.carried]
    if not dropped:
        return matched
    nulls = ", ".join(f"CASE WHEN _change IN ('same', 'stale') THEN NULL ELSE {q(c)} END AS {q(c)}" for c in dropped)
    return f"SELECT * REPLACE ({nulls}) FROM ({matched})"


# A load joined against a table that holds rows is joined in slices of a key column, each at most about this many
# bytes (its rows as text) per byte of DuckDB's memory limit: a hash join spills, yet one over a scale-large full
# refresh's ~10M answers ran out of memory at 256MiB while two slices of it did not.
SLICE_BYTES_PER_LIMIT_BYTE = 4.0
SLICE_WIDTH_ROWS = 2_000  # the first rows, whose average width as text stands for every row's
SLICE_SAMPLE_ROWS = 100_000  # the reservoir sample of the key column that places the slices' bounds


@dataclass(frozen=True)
class Slice:
    """One half-open range of a column's values (open at either end where there is no bound); the whole range
    when both are None. The slices of key_slices cover every non-NULL value exactly once."""

    lower: object = None  # included
    upper: object = None  # excluded

    def where(self, expression: str) -> str:
        """The SQL condition that `expression` lies in this slice (TRUE for the whole range)."""
        bounds = [f"{expression} >= $slice_from"] if self.lower is not None else []
        bounds += [f"{expression} < $slice_to"] if self.upper is not None else []
        return " AND ".join(bounds) or "TRUE"

    @property
    def params(self) -> dict[str, object]:
        return {
            **({"slice_from": self.lower} if self.lower is not None else {}),
            **({"slice_to": self.upper} if self.upper is not None else {}),
        }


WHOLE_RANGE = Slice()


def key_slices(conn: duckdb.DuckDBPyConnection, relation: str, column: str) -> list[Slice]:
    """Slices of `column`'s values in `relation` (a table or subquery) whose rows are each about
    SLICE_BYTES_PER_LIMIT_BYTE of the memory limit: one whole range when they all fit (found from the count and
    the first rows alone, a few milliseconds), else ranges between the quantiles of a sample. A joined row of the
    other side has the same value of the column, so it falls in the same slice; NULL is in none, and key columns
    are never NULL."""
    rows, width = conn.execute(
        f"SELECT (SELECT count(*) FROM {relation}), "
        f"(SELECT avg(strlen(CAST(s AS VARCHAR))) FROM (SELECT * FROM {relation} LIMIT {SLICE_WIDTH_ROWS}) AS s)"
    ).fetchall()[0]
    limit = memory_limit_bytes(conn)
    count = math.ceil(rows * (width or 0) / (limit * SLICE_BYTES_PER_LIMIT_BYTE)) if limit else 1
    if count <= 1:
        return [WHOLE_RANGE]
    shares = [i / count for i in range(1, count)]
    bounds = conn.execute(
        f"SELECT list_distinct(quantile_disc(v, {shares})) FROM "
        f"(SELECT {q(column)} AS v FROM {relation} USING SAMPLE reservoir({SLICE_SAMPLE_ROWS} ROWS) REPEATABLE (7))"
    ).fetchall()[0][0]
    edges = [None, *sorted(bounds or []), None]
    log.info("joining %s rows of %s in %d slices of %s", f"{rows:,}", relation, len(edges) - 1, column)
    return [Slice(lower, upper) for lower, upper in itertools.pairwise(edges)]


# An incremental load whose rows are at most this share of its table's is staged in two phases (_matched_sql).
# Below it the two phases are faster; around it both ways cost the same (docs/warehouse.md, "Small loads into big tables").
FEW_OF_MANY = 0.01


def _few_of_many(conn: duckdb.DuckDBPyConnection, stage: Stage, loaded: str) -> bool:
    if stage.load.kind != "incremental" or stage.target_was_empty:
        return False
    rows, target_rows = conn.execute(
        f"SELECT (SELECT count(*) FROM {loaded}), (SELECT count(*) FROM {table_ref(stage.target.name)})"
    ).fetchall()[0]
    return bool(rows <= FEW_OF_MANY * target_rows)


def _loaded(stage: Stage) -> str:
    return f"_loaded_{stage.load.name}"


def _matched(stage: Stage) -> str:
    return f"_matched_{stage.load.name}"


@contextmanager
def values_must_fit(load: TableLoad) -> Iterator[None]:
    """A value the cast to its warehouse column refuses becomes a SchemaError naming the table."""
    try:
        yield
    except duckdb.ConversionException as error:
        raise SchemaError(
            f"table {load.name}: a value of this load does not fit its warehouse column "
            f"({error}); fix the client's conversion for that column."
        ) from None


@contextmanager
def duplicate_keys_of(
    conn: duckdb.DuckDBPyConnection, load: TableLoad, target: TableDef, files: list[str]
) -> Iterator[str | None]:
    """A temp table of the hashes (key_hash) of the keys that occur more than once in the load's parts, dropped
    afterwards; None when every key occurs once, the usual case: a drift re-fetch or a per-user request
    overlapping a per-lesson one are the exceptions, so whether any hash repeats is asked first (repeats_any).
    Grouping one 64-bit hash of the key columns (the parts are read for those columns only) is far cheaper than a
    window over whole rows, which sorts them, and its groups are a tenth of the key's size (22M keys at scale
    large). Two keys sharing a hash only send both through the window, which partitions by the key itself: the
    result is exact either way."""
    if not repeats_any(conn, key_hash(load, target), load.scan(), {"files": files}):
        yield None
        return
    name = f"_duplicate_keys_{load.name}"
    conn.execute(f"DROP TABLE IF EXISTS temp.{q(name)}")
    conn.execute(
        f"CREATE TEMP TABLE {q(name)} AS SELECT {key_hash(load, target)} AS key_hash "
        f"FROM {load.scan()} GROUP BY ALL HAVING count(*) > 1",
        {"files": files},
    )
    found = conn.execute(f"SELECT count(*) > 0 FROM temp.{q(name)}").fetchall()[0][0]
    yield name if found else None
    # not on an error: that aborts the load's transaction, whose rollback takes the temp table with it
    conn.execute(f"DROP TABLE temp.{q(name)}")


def key_hash(load: TableLoad, target: TableDef, alias: str = "") -> str:
    """hash() of the key columns cast to their warehouse types (the values the dedupe partitions by); from the
    Parquet columns, or from `alias`'s columns already cast."""
    types = dict(target.columns)
    if alias:
        return f"hash({', '.join(f'{alias}.{q(k)}' for k in load.key)})"
    return f"hash({', '.join(f'CAST({q(k)} AS {types[k]})' for k in load.key)})"


def deduped_sql(load: TableLoad, target: TableDef, duplicates: str | None) -> str:
    """The load's rows (parameter $files: its Parquet parts), cast to the warehouse types, one per key:
    the greatest cursor field (or the greatest by order_by) wins, ties go to the row written last.
    `duplicates` (duplicate_keys_of) names the temp table of the hashes of keys that occur more than once:
    only their rows go through the window that picks the winner; None: every row is its key's only one."""
    types = dict(target.columns)
    columns = ", ".join(q(c) for c in load.columns)
    casts = ", ".join(f"CAST({q(c)} AS {types[c]}) AS {q(c)}" for c in load.columns)
    if duplicates is None:
        return f"SELECT {casts} FROM {load.scan()}"
    order = [f"{q(c)} DESC NULLS LAST" for c in ordering(load)]
    order += ["_lake_file DESC", "file_row_number DESC"]  # ties: the last written row wins
    duplicated = f"{key_hash(load, target, 's')} IN (SELECT key_hash FROM temp.{q(duplicates)})"
    # the parts are read twice rather than through one CTE, which DuckDB could materialize whole
    return f"""SELECT {columns} FROM (SELECT {casts} FROM {load.scan()}) AS s WHERE NOT ({duplicated})
        UNION ALL
        SELECT {columns} FROM (
            SELECT {casts}, _lake_file, file_row_number
            FROM {load.scan("filename = '_lake_file', file_row_number = true")}) AS s
        WHERE {duplicated}
        QUALIFY row_number() OVER (PARTITION BY {", ".join(q(k) for k in load.key)}
                                   ORDER BY {", ".join(order)}) = 1"""


def ordering(load: TableLoad) -> tuple[str, ...]:
    """Columns deciding which version of a key wins, greatest first: order_by, else the cursor field."""
    return load.order_by or ((load.cursor_field,) if load.cursor_field else ())


def _ordered_before(columns: tuple[str, ...]) -> str:
    """s sorts strictly before t by `columns` compared in order, NULL lowest (as the dedupe's NULLS LAST)."""
    first, rest = q(columns[0]), columns[1:]
    lower = f"((s.{first} IS NULL AND t.{first} IS NOT NULL) OR s.{first} < t.{first})"
    if not rest:
        return lower
    return f"({lower} OR (s.{first} IS NOT DISTINCT FROM t.{first} AND {_ordered_before(rest)}))"


def _matched_sql(stage: Stage, *, by_row_id: bool, within: Slice = WHOLE_RANGE) -> str:
    """The loaded rows whose first key column lies `within` a slice of it (key_slices), each with its `_change`,
    the row id of its key's row in the table and the carried columns of that row, in no particular order."""
    load, target = stage.load, stage.target
    table, loaded = table_ref(target.name), f"temp.{q(_loaded(stage))}"
    first = q(load.key[0])
    in_slice = ""
    if within != WHOLE_RANGE:
        predicate = within.where(first)
        in_slice = f" AND {predicate}"
        loaded = f"(SELECT * FROM {loaded} WHERE {predicate})"
    carried = "".join(f", t.{q(c)} AS {q(old_value_column(c))}" for c in stage.carried)
    # The load's rows are the hash table; the warehouse table is only scanned (the tables have no key index),
    # and only where its first key column lies within the load's range of it: zone maps skip the row groups
    # wholly outside (those of later loads, whose new keys go in sorted; a first load's rows are in no order).
    # A few rows of a big table (by_row_id) have keys spread over the whole range (a 1%-change run's answers:
    # every row group): the table's rows whose first key column is one of the load's are found first, on that
    # column alone. A larger load (a snapshot, a full refresh, a backfill) holds most keys: the filter would keep
    # nearly every row and add a semi-join whose hash table, beside the join's, did not spill (out of memory at
    # scale small under 100MiB).
    among_loaded = f" AND {first} IN (SELECT DISTINCT {first} FROM {loaded})" if by_row_id else ""
    in_range = f"WHERE {first} BETWEEN $lowest AND $highest{in_slice}{among_loaded}"
    if not by_row_id:
        return f"""SELECT s.*, {_classify(load, target)} AS _change, t._rowid AS _rowid{carried}
            FROM {loaded} AS s LEFT JOIN (SELECT rowid AS _rowid, * FROM {table} {in_range}) AS t
            ON {join_on(load.key, "s", "t")}"""
    # Few rows of a big table (FEW_OF_MANY): the scan over the whole range reads the key columns only, to match
    # each loaded row to its row id; the other columns are then read for the matched row ids alone (DuckDB
    # pushes the join's row ids into the scan), not for every row of every row group the scan touched.
    keys = ", ".join(q(k) for k in load.key)
    return f"""WITH matched AS (
            SELECT s.*, t._rowid FROM {loaded} AS s LEFT JOIN (SELECT rowid AS _rowid, {keys} FROM {table} {in_range})
            AS t ON {join_on(load.key, "s", "t")})
        SELECT s.* EXCLUDE (_rowid), {_classify(load, target)} AS _change, s._rowid AS _rowid{carried}
        FROM matched AS s LEFT JOIN (SELECT rowid AS _target_rowid, * FROM {table}) AS t ON t._target_rowid = s._rowid"""


def _classify(load: TableLoad, target: TableDef) -> str:
    types = dict(target.columns)
    data = [c for c in load.columns if c not in load.key]
    lists = [c for c in data if is_list_type(types[c])]
    scalars = [c for c in data if c not in lists]
    cases = [f"WHEN t.{q(load.key[0])} IS NULL THEN 'insert'"]
    if load.order_by:
        cases.append(f"WHEN {_ordered_before(load.order_by)} THEN 'stale'")
    elif load.cursor_field:  # a NULL cursor on either side is applied (order_by streams order NULL lowest)
        cases.append(f"WHEN s.{q(load.cursor_field)} < t.{q(load.cursor_field)} THEN 'stale'")
    if lists:
        cases.append(f"WHEN {_any_differs(lists)} THEN 'rewrite'")
    revived = [f"t.{q(DELETED_AT)} IS NOT NULL"] if target.has_deleted_at else []
    changed = revived + ([_any_differs(scalars)] if scalars else [])
    if changed:
        cases.append(f"WHEN {' OR '.join(changed)} THEN 'update'")
    return f"CASE {' '.join(cases)} ELSE 'same' END"


def _any_differs(columns: list[str]) -> str:
    return "(" + " OR ".join(f"s.{q(c)} IS DISTINCT FROM t.{q(c)}" for c in columns) + ")"


def join_on(key: tuple[str, ...], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{q(k)} = {right}.{q(k)}" for k in key)


def value_range(
    conn: duckdb.DuckDBPyConnection, relation: str, column: str, params: dict[str, object] | None = None
) -> dict[str, object]:
    """{"lowest": min, "highest": max} of `column` in `relation` (SQL), the parameters of a
    `BETWEEN $lowest AND $highest` that lets a big table in key order be read only where a few rows lie."""
    lowest, highest = conn.execute(f"SELECT min({q(column)}), max({q(column)}) FROM {relation}", params).fetchall()[0]
    return {"lowest": lowest, "highest": highest}


def count_changes(conn: duckdb.DuckDBPyConnection, stage: Stage) -> dict[str, int]:
    counts = dict.fromkeys(CHANGES, 0)
    if stage.inserted is not None:
        counts["insert"] = stage.inserted
        return counts
    rows = conn.execute(f"SELECT _change, count(*) FROM {q(stage.name)} GROUP BY _change").fetchall()
    counts.update(dict(rows))
    return counts


def has_stale_rows(conn: duckdb.DuckDBPyConnection, stage: Stage) -> bool:
    if stage.inserted_directly:
        return False
    return bool(conn.execute(f"SELECT count(*) > 0 FROM {q(stage.name)} WHERE _change = 'stale'").fetchall()[0][0])


def mark_stale_children(conn: duckdb.DuckDBPyConnection, child: Stage, parent: Stage, link: ChildLink) -> None:
    """Children of a parent row that is stale in this load are stale too: the newer parent in the
    warehouse owns its own (newer) children."""
    if not has_stale_rows(conn, parent):
        return
    match = " AND ".join(f"c.{q(cc)} = p.{q(pc)}" for cc, pc in link.on)
    conn.execute(
        f"UPDATE {q(child.name)} AS c SET _change = 'stale' WHERE EXISTS "
        f"(SELECT 1 FROM {q(parent.name)} AS p WHERE p._change = 'stale' AND {match})"
    )


def drop_stage(conn: duckdb.DuckDBPyConnection, stage: Stage, *, keep_stage: bool = False) -> None:
    if stage.inserted_directly:
        return  # no temp table
    names = (_loaded(stage), _matched(stage)) + (() if keep_stage else (stage.name,))
    for name in names:
        conn.execute(f"DROP TABLE IF EXISTS temp.{q(name)}")
