"""A load that discovers a column midway (contract/evolution.py): its parts widen (the ones written before keep their
fewer columns, named in the manifest), the table gains the typed, described column, lms._discovered_columns records
it with the load's seq, an existing row is updated through it, and a rebuild from the lake reaches the same schema,
comments and rows."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
from warehouse_helpers import ACTIVE_LESSONS, GROUPS, T0, batch, dump, make_warehouse

from pipeline.contract.evolution import DiscoveredColumn, evolved_spec
from pipeline.warehouse import Warehouse, discovered_columns, read_table_def
from pipeline.warehouse.lake.lake import list_manifests, read_manifest
from pipeline.warehouse.upkeep.rebuild import rebuild_into

QUIZ = DiscoveredColumn("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT")
TAGS = DiscoveredColumn("groups", "tags", "tags", "JSON")
WIDE = evolved_spec(ACTIVE_LESSONS, [QUIZ])


def lesson(user: str, minutes: int = 0, **more: object) -> dict[str, object]:
    return {"user_id": user, "lesson_id": "l1", "score": 1.0, "last_date": T0 + timedelta(minutes=minutes), **more}


def comments(wh: Warehouse, table: str) -> dict[str, str | None]:
    with wh.connect(read_only=True) as conn:
        rows = conn.execute(
            "SELECT column_name, comment FROM duckdb_columns() WHERE schema_name = 'lms' AND table_name = ?", [table]
        ).fetchall()
    return dict(rows)


def manifest(wh: Warehouse, seq: int) -> dict:
    ref = dict(list_manifests(wh.lake))[seq]
    return json.loads(read_manifest(wh.lake, ref))


def test_a_load_that_discovers_a_column_midway_widens_and_rebuilds_the_same(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "data", part_rows=2, row_group_rows=2)
    wh.ensure_tables([ACTIVE_LESSONS, GROUPS])
    with wh.load("active_lessons", "run1", T0) as load:
        load.write(ACTIVE_LESSONS, batch(ACTIVE_LESSONS, [lesson("u1"), lesson("u2"), lesson("u3")]))
        load.write(WIDE, batch(WIDE, [lesson("u4", quiz_time_seconds=40), lesson("u5")]))
        load.write(ACTIVE_LESSONS, batch(ACTIVE_LESSONS, [lesson("u6")]))  # made before the discovery reached it
        first = load.commit(cursor=T0, discovered=[QUIZ])
    with wh.connect(read_only=True) as conn:
        assert dict(read_table_def(conn, "active_lessons").columns)["quiz_time_seconds"] == "BIGINT"
        values = conn.execute("SELECT user_id, quiz_time_seconds FROM lms.active_lessons ORDER BY 1").fetchall()
    assert values == [("u1", None), ("u2", None), ("u3", None), ("u4", 40), ("u5", None), ("u6", None)]
    assert comments(wh, "active_lessons")["quiz_time_seconds"] == (
        f"field quizTimeSeconds the platform began sending; not in the spec; first seen in load {first.seq}"
    )
    registered = wh.discovered_columns()
    assert [(c.column, c.type, c.first_seen_load) for c in registered] == [("quiz_time_seconds", "BIGINT", first.seq)]
    parts = manifest(wh, first.seq)["tables"][0]["parts"]
    narrow = [p for p in parts if "columns" in p]
    assert narrow and all(p["columns"] == ACTIVE_LESSONS.schema.names for p in narrow)
    assert manifest(wh, first.seq)["discovered"][0]["column"] == "quiz_time_seconds"

    # the next load knows the column from the start (a new run reads lms._discovered_columns): an update through it
    known = registered[0]
    spec = evolved_spec(ACTIVE_LESSONS, [known])
    with wh.load("active_lessons", "run2", T0) as load:
        load.write(spec, batch(spec, [lesson("u1", 5, quiz_time_seconds=7), lesson("u4", 5, quiz_time_seconds=41)]))
        second = load.commit(cursor=T0)
    assert second.tables["active_lessons"].updated == 2
    assert "discovered" not in manifest(wh, second.seq)
    # a snapshot table discovering a JSON column in its first load
    groups = evolved_spec(GROUPS, [TAGS])
    with wh.load("groups", "run2", T0) as load:
        load.write(GROUPS, batch(GROUPS, [{"id": "g1"}]))
        load.write(groups, batch(groups, [{"id": "g2", "tags": '["a"]'}]))
        load.commit(complete_snapshots={"groups"}, discovered=[TAGS])
    with wh.connect(read_only=True) as conn:
        assert discovered_columns(conn)[-1].type == "JSON"
        assert dict(read_table_def(conn, "groups").columns)["tags"] == "JSON"

    rebuilt = make_warehouse(tmp_path / "copy")
    rebuild_into(wh.lake_dir, rebuilt.path, wh.connection_settings)
    assert dump(rebuilt) == dump(wh)  # every table, lms._discovered_columns included
    for table, column in (("active_lessons", "quiz_time_seconds"), ("groups", "tags")):
        assert comments(rebuilt, table)[column] == comments(wh, table)[column]  # described from the manifest
        with duckdb.connect(str(rebuilt.path), read_only=True) as a, duckdb.connect(str(wh.path), read_only=True) as b:
            assert read_table_def(a, table) == read_table_def(b, table)  # same columns, types, order
