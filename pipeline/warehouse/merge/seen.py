"""What the load records (lms._load_runs) tell of a table without a row being read or written.

- Last seen. A load writes only the rows it inserts, changes, revives or marks deleted (merge/upsert.py), and a
  repeated snapshot writes none (merge/repeats.py). A complete snapshot sees every row of its table that it does
  not mark deleted, and says so once, in its record (lms._snapshot_seen), instead of on each row. A row was last
  seen by the newest load that wrote its last_loaded_at or, if later, by the newest complete snapshot of its
  table committed while the row was live (before its deleted_at): `last_seen_sql`.
- Content version. The seq of the newest load that inserted, updated or deleted rows of a table: it moves exactly
  when the table's rows do, load times included, survives restarts and rebuilds (the loads and their counts are
  replayed), and is what a Dagster materialization reports as its data version (and what the analyst models'
  inputs and the published files count)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.schema import table_ref
from pipeline.warehouse.duck.tabledef import DELETED_AT, LAST_LOADED_AT, ROW_CHANGES, SCHEMA, TableDef
from pipeline.warehouse.merge.state import LOAD_RUNS, SNAPSHOT_SEEN


def last_seen_sql(table: TableDef) -> str:
    """Every row of `table` with `last_seen_at`: when LessonSync last saw it on the platform. A table no complete
    snapshot loads (incremental, append) is never seen whole: its rows' last_seen_at is their last_loaded_at."""
    if not table.has_deleted_at:
        return f"SELECT t.*, t.{q(LAST_LOADED_AT)} AS last_seen_at FROM {table_ref(table.name)} AS t"
    name = table.name.replace("'", "''")
    seen = f"(SELECT seen_at FROM {SNAPSHOT_SEEN} WHERE table_name = '{name}')"
    # ASOF: the newest snapshot committed before the row was marked deleted (any, while it is live)
    return f"""SELECT t.*, greatest(t.{q(LAST_LOADED_AT)}, s.seen_at) AS last_seen_at
        FROM {table_ref(table.name)} AS t ASOF LEFT JOIN {seen} AS s
        ON coalesce(t.{q(DELETED_AT)}, 'infinity'::TIMESTAMPTZ) > s.seen_at"""


def snapshot_seen(conn: duckdb.DuckDBPyConnection, table: str) -> tuple[int, datetime] | None:
    """(load seq, commit time) of the newest complete snapshot of `table`: every live row of it was seen then."""
    rows = conn.execute(
        f"SELECT load_seq, seen_at FROM {SNAPSHOT_SEEN} WHERE table_name = ? ORDER BY load_seq DESC LIMIT 1", [table]
    ).fetchall()
    return (int(rows[0][0]), rows[0][1]) if rows else None


def content_versions(conn: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, int]:
    """Per table, the seq of the newest load that inserted, updated or deleted rows of it; a table no load changed
    (or a warehouse with no load yet) is absent. One pass over lms._load_runs, whose rows are one per load."""
    return _newest_loads(conn, tables, _CHANGED)


def content_version_ids(conn: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> dict[str, str]:
    """`content_versions` as `<seq>-<load id>`: a warehouse synced anew numbers its loads from 1 again, while a
    rebuild replays the same loads, ids included, into the same rows. A table no load changed is absent."""
    return _with_load_ids(conn, content_versions(conn, tables))


_CHANGED = "(" + " OR ".join(f"coalesce(CAST(t.value ->> '{count}' AS BIGINT), 0) > 0" for count in ROW_CHANGES) + ")"


def _newest_loads(conn: duckdb.DuckDBPyConnection, tables: Iterable[str], condition: str) -> dict[str, int]:
    wanted = sorted(set(tables))
    if not wanted or not _has_load_runs(conn):
        return {}
    rows = conn.execute(
        f"SELECT t.key, max(r.load_seq) FROM {LOAD_RUNS} AS r, json_each(r.tables) AS t "
        f"WHERE t.key IN (SELECT unnest($tables)) AND {condition} GROUP BY t.key",
        {"tables": wanted},
    ).fetchall()
    return {str(name): int(seq) for name, seq in rows}


def _with_load_ids(conn: duckdb.DuckDBPyConnection, versions: dict[str, int]) -> dict[str, str]:
    if not versions:
        return {}
    ids = dict(
        conn.execute(
            f"SELECT load_seq, load_id FROM {LOAD_RUNS} WHERE load_seq IN (SELECT unnest($seqs))",
            {"seqs": sorted(set(versions.values()))},
        ).fetchall()
    )
    return {table: f"{seq}-{ids[seq]}" for table, seq in versions.items()}


def is_committed_load(conn: duckdb.DuckDBPyConnection, version_id: str) -> bool:
    """Whether the load a content version id names (`content_version_ids`) is committed in this warehouse."""
    seq, _, load_id = version_id.partition("-")
    if not seq.isdigit() or not load_id or not _has_load_runs(conn):
        return False
    found = conn.execute(f"SELECT count(*) FROM {LOAD_RUNS} WHERE load_seq = ? AND load_id = ?", [int(seq), load_id])
    return bool(found.fetchall()[0][0])


def _has_load_runs(conn: duckdb.DuckDBPyConnection) -> bool:
    """Whether lms._load_runs exists: a reader may open a file no write path has prepared yet."""
    return bool(
        conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = '_load_runs'",
            [SCHEMA],
        ).fetchall()[0][0]
    )
