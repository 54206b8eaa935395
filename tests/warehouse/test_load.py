"""A load: lake parts written once, cursor committed with the rows, nothing on failure, idempotent
re-runs, append tables, and clear errors for bad batches."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from warehouse_helpers import (
    ANSWER_RESULTS,
    ANSWERS,
    QUARANTINE,
    T0,
    answer,
    batch,
    dump,
    load_once,
    make_warehouse,
    result,
)

from pipeline.contract.tables import TableSpec
from pipeline.warehouse import SchemaError, TableLoadStats, Warehouse, WarehouseError
from pipeline.warehouse.lake.lake import PartWriter, list_manifests
from pipeline.warehouse.lake.lakestore import open_lake


def lake_files(wh: Warehouse) -> list[str]:
    return sorted(p.relative_to(wh.lake_dir).as_posix() for p in wh.lake_dir.rglob("*") if p.is_file())


def test_flush_writes_buffered_rows_as_a_row_group_and_later_rows_still_commit(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path, row_group_rows=100, part_rows=1000)
    with wh.load("answers", "run-1", T0) as load:
        load.write(ANSWERS, batch(ANSWERS, [answer("a0", "q1"), answer("a0", "q2"), answer("a1", "q1")]))
        load.flush()  # before the commit (pipeline/raw/commit.py): the buffer goes to the part, not the memory
        load.write(ANSWERS, batch(ANSWERS, [answer("a2", "q1")]))
        outcome = load.commit(cursor=T0)
    part = pq.ParquetFile(wh.lake_dir / f"answers/loaded_date=2026-11-01/{outcome.load_id}/part-000000.parquet")
    assert [part.metadata.row_group(i).num_rows for i in range(part.num_row_groups)] == [3, 1]
    assert outcome.metadata()["answers.inserted"] == 4
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM lms.answers").fetchone()[0] == 4


def test_lake_layout_parts_and_manifest(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path, row_group_rows=2, part_rows=3)
    with wh.load("answers", "run-1", T0) as load:
        for i in range(4):  # 8 answer rows: parts of 3 rows (a part closes after the row group crossing 3)
            load.write(ANSWERS, batch(ANSWERS, [answer(f"a{i}", "q1"), answer(f"a{i}", "q2")]))
        load.write(ANSWER_RESULTS, batch(ANSWER_RESULTS, [result("a0", "q1", 0, "x")]))
        outcome = load.commit(cursor=T0, stats={"requests": 3, "retries": 1})
    prefix = f"answers/loaded_date=2026-11-01/{outcome.load_id}"
    assert lake_files(wh) == [
        f"_loads/0000000001-{outcome.load_id}.json",
        f"answer_results/loaded_date=2026-11-01/{outcome.load_id}/part-000000.parquet",
        f"{prefix}/part-000000.parquet",
        f"{prefix}/part-000001.parquet",
    ]
    part = pq.read_table(wh.lake_dir / prefix / "part-000000.parquet")
    assert part.num_rows == 4
    assert part.schema.field("validation").metadata == {b"json": b"1"}
    assert part.schema.metadata[b"lessonsync.load_id"] == outcome.load_id.encode()
    manifest = json.loads(outcome.manifest.read_text())
    assert manifest["seq"] == 1 and manifest["stream"] == "answers" and manifest["cursor"] == T0.isoformat()
    assert [p["rows"] for p in manifest["tables"][0]["parts"]] == [4, 4]
    assert manifest["stats"] == {"requests": 3, "retries": 1}
    assert manifest["outcome"]["tables"]["answers"]["inserted"] == 8
    assert outcome.metadata()["answers.inserted"] == 8 and outcome.metadata()["load_seq"] == 1
    with wh.connect(read_only=True) as conn:
        recorded = conn.execute("SELECT stats FROM lms._load_runs").fetchone()[0]
    assert json.loads(recorded) == {"requests": 3, "retries": 1}


def test_exception_before_commit_leaves_warehouse_and_lake_untouched(seeded: Warehouse) -> None:
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])], cursor=T0)
    before, files_before = dump(seeded), lake_files(seeded)
    with pytest.raises(RuntimeError, match="network gone"), seeded.load("answers", "run-2", T0) as load:
        load.write(ANSWERS, batch(ANSWERS, [answer("a1", "q1", valid=False, minutes=5), answer("a9", "q1")]))
        raise RuntimeError("network gone")
    assert dump(seeded) == before
    assert lake_files(seeded) == files_before  # the abandoned parts are removed
    assert seeded.cursor("answers") == T0


def test_failure_inside_commit_rolls_everything_back(seeded: Warehouse) -> None:
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])], cursor=T0)
    before, files_before = dump(seeded), lake_files(seeded)
    # the upsert of answers runs, then marking "answers" as a complete snapshot fails in the same transaction
    with pytest.raises(SchemaError, match="answers has no deleted_at column"):
        load_once(
            seeded,
            "answers",
            [(ANSWERS, [answer("a1", "q1", minutes=9, valid=False), answer("a9", "q1")])],
            cursor=T0 + timedelta(hours=1),
            complete_snapshots={"answers"},
        )
    assert dump(seeded) == before
    assert lake_files(seeded) == files_before
    assert seeded.cursor("answers") == T0


def test_cursor_is_committed_with_the_rows_and_never_moves_back(seeded: Warehouse) -> None:
    first = load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])], cursor=T0 + timedelta(hours=2))
    assert (first.cursor_before, first.cursor_after) == (None, T0 + timedelta(hours=2))
    backfill = load_once(seeded, "answers", [(ANSWERS, [answer("a0", "q1")])], cursor=T0)
    assert (backfill.cursor_before, backfill.cursor_after) == (T0 + timedelta(hours=2), T0 + timedelta(hours=2))
    assert seeded.cursor("answers") == T0 + timedelta(hours=2)
    empty_window = load_once(seeded, "answers", [], cursor=T0 + timedelta(hours=3))
    assert empty_window.tables == {} and seeded.cursor("answers") == T0 + timedelta(hours=3)
    assert seeded.cursor("groups") is None
    with seeded.connect(read_only=True) as conn:
        runs = conn.execute(
            "SELECT load_seq, cursor_requested, cursor_before, cursor_after FROM lms._load_runs ORDER BY 1"
        ).fetchall()
    assert runs[1] == (2, T0, T0 + timedelta(hours=2), T0 + timedelta(hours=2))


def test_rerunning_a_window_is_idempotent(seeded: Warehouse) -> None:
    window = [
        (ANSWERS, [answer("a1", "q1"), answer("a2", "q1", tags=["x"])]),
        (ANSWER_RESULTS, [result("a1", "q1", 0, "x"), result("a1", "q1", 1, "y")]),
    ]
    load_once(seeded, "answers", window, cursor=T0)
    first = dump(seeded, ("answers", "answer_results"))
    again = load_once(seeded, "answers", window, cursor=T0)
    assert again.tables == {
        "answers": TableLoadStats(fetched=2, unchanged=2),
        "answer_results": TableLoadStats(fetched=2, unchanged=2),
    }
    # rows read again unchanged are not written: every column of every row as it was, last_loaded_at included
    assert dump(seeded, ("answers", "answer_results")) == first


def test_append_tables_only_append(seeded: Warehouse) -> None:
    quarantined = [{"seen_at": T0, "stream": "answers", "raw": '{"bad": true}'}]
    load_once(seeded, "answers", [(QUARANTINE, quarantined)])
    second = load_once(seeded, "answers", [(QUARANTINE, quarantined)])
    assert second.tables["quarantine"] == TableLoadStats(fetched=1, inserted=1)
    with seeded.connect(read_only=True) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT first_loaded_at) FROM lms.quarantine").fetchone() == (2, 2)


def test_bad_batches_are_refused_before_anything_is_written(wh: Warehouse) -> None:
    with wh.load("answers", "run", T0) as load:
        with pytest.raises(SchemaError, match=r"batch columns do not match the spec \(missing \['last_date'\]"):
            load.write(ANSWERS, batch(ANSWERS, [answer("a1", "q1")]).drop_columns(["last_date"]))
        wrong = batch(ANSWERS, [answer("a1", "q1")])
        wrong = wrong.set_column(2, "attempt_index", pa.array([1], pa.int64()))
        with pytest.raises(SchemaError, match=r"column 'attempt_index' is int64 in the batch but double"):
            load.write(ANSWERS, wrong)
        nullable = pa.schema([field.with_nullable(True) for field in ANSWERS.schema])
        nulls = pa.RecordBatch.from_pylist([{**answer("a1", "q1"), "question_id": None}], schema=nullable)
        with pytest.raises(SchemaError, match=r"1 row\(s\) of this batch have a null key column 'question_id'"):
            load.write(ANSWERS, nulls)
        with pytest.raises(SchemaError, match="expected a pyarrow RecordBatch or Table"):
            load.write(ANSWERS, [answer("a1", "q1")])  # type: ignore[arg-type]
        load.abort()
    assert lake_files(wh) == []


def test_a_load_is_used_once(wh: Warehouse) -> None:
    with wh.load("answers", "run", T0) as load:
        load.write(ANSWERS, batch(ANSWERS, [answer("a1", "q1")]))
        load.commit()
        with pytest.raises(WarehouseError, match="is committed; start a new one"):
            load.write(ANSWERS, batch(ANSWERS, [answer("a2", "q1")]))
        with pytest.raises(WarehouseError, match="already committed"):
            load.abort()
    with pytest.raises(WarehouseError, match="must be a timezone-aware datetime"):
        wh.load("answers", "run", T0.replace(tzinfo=None))
    with pytest.raises(WarehouseError, match="run_id 'a/b'"):
        wh.load("answers", "a/b", T0)
    with pytest.raises(WarehouseError, match="JSON-serializable"), wh.load("answers", "run", T0) as load:
        load.commit(stats={"when": T0})
    assert [seq for seq, _ in list_manifests(wh.lake_dir)] == [1]


# A table whose winning version is decided by two columns, NULL lowest: `order_by` (certificates use it).
VERSIONED = TableSpec(
    name="versioned",
    key=("id",),
    kind="incremental",
    cursor_field="day",
    order_by=("day", "rank"),
    schema=pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("day", pa.int64()),
            pa.field("rank", pa.int64()),
            pa.field("note", pa.string()),
        ]
    ),
)
EVENTS_LOG = TableSpec(
    name="events_log",
    key=("event_id",),
    kind="append",
    schema=pa.schema([pa.field("event_id", pa.string(), nullable=False), pa.field("note", pa.string())]),
)


def test_order_by_decides_the_winner_within_a_load_and_against_the_table(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path)
    first = load_once(
        wh,
        "versions",
        [
            (
                VERSIONED,
                [
                    {"id": "a", "day": 2, "rank": 0, "note": "a-day2"},
                    {"id": "a", "day": 1, "rank": 9, "note": "a-day1"},
                    {"id": "b", "day": 2, "rank": 1, "note": "b-rank1"},
                    {"id": "b", "day": 2, "rank": 0, "note": "b-rank0"},
                    {"id": "c", "day": None, "rank": 5, "note": "c-null"},
                    {"id": "c", "day": 1, "rank": 0, "note": "c-day1"},
                    {"id": "d", "day": 1, "rank": 1, "note": "d-first"},
                    {"id": "d", "day": 1, "rank": 1, "note": "d-last"},
                ],
            )
        ],
    )
    assert first.tables["versioned"].inserted == 4
    second = load_once(
        wh,
        "versions",
        [
            (
                VERSIONED,
                [
                    {"id": "a", "day": 2, "rank": None, "note": "a-null-rank"},  # lower on the second column: stale
                    {"id": "b", "day": 2, "rank": 2, "note": "b-rank2"},  # higher on the second column: applied
                    {"id": "c", "day": None, "rank": 9, "note": "c-null-again"},  # NULL day sorts below day 1: stale
                    {"id": "d", "day": 1, "rank": 1, "note": "d-tie"},
                ],
            )
        ],
    )  # a tie is applied, as within a load (last wins)
    assert (second.tables["versioned"].stale, second.tables["versioned"].updated) == (2, 2)
    assert [row[:2] for row in dump(wh, ("versioned",))["versioned"]] == [("a", 2), ("b", 2), ("c", 1), ("d", 1)]
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT note FROM lms.versioned ORDER BY id").fetchall() == [
            ("a-day2",),
            ("b-rank2",),
            ("c-day1",),
            ("d-tie",),
        ]


def test_a_keyed_append_table_keeps_the_first_row_of_a_key(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path)
    first = load_once(
        wh,
        "log",
        [
            (
                EVENTS_LOG,
                [
                    {"event_id": "e1", "note": "one"},
                    {"event_id": "e1", "note": "dup"},
                    {"event_id": "e2", "note": "two"},
                ],
            )
        ],
    )
    again = load_once(
        wh, "log", [(EVENTS_LOG, [{"event_id": "e2", "note": "redelivered"}, {"event_id": "e3", "note": "three"}])]
    )
    assert first.tables["events_log"] == TableLoadStats(fetched=3, inserted=2, unchanged=1)
    assert again.tables["events_log"] == TableLoadStats(fetched=2, inserted=1, unchanged=1)
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT event_id, note FROM lms.events_log ORDER BY 1").fetchall() == [
            ("e1", "one"),
            ("e2", "two"),
            ("e3", "three"),
        ]


def test_a_position_only_moves_forward_and_is_kept_apart_from_the_cursor(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path)
    assert wh.position("log") is None
    first = load_once(wh, "log", [(EVENTS_LOG, [{"event_id": "e1"}])], position=10)
    assert (first.position_before, first.position_after, wh.position("log")) == (None, 10, 10)
    older = load_once(wh, "log", [], position=4)  # a late, slower load never rewinds the position
    assert (older.position_before, older.position_after, wh.position("log")) == (10, 10, 10)
    assert wh.cursor("log") is None and load_once(wh, "answers", [], cursor=T0).position_after is None
    manifest = json.loads(Path(older.manifest).read_text())
    assert (manifest["position"], manifest["outcome"]["position_before"], manifest["outcome"]["position_after"]) == (
        4,
        10,
        10,
    )
    assert "position" not in json.loads(Path(load_once(wh, "answers", [], cursor=T0).manifest).read_text())
    with pytest.raises(WarehouseError, match="position .* must be a non-negative int"):
        load_once(wh, "log", [], position=-1)


def test_row_groups_written_in_the_background_keep_every_row_in_order(tmp_path: Path) -> None:
    """PartWriter hands each full row group to a background thread and returns: the parts still hold every
    row once, in the order written, in row groups of exactly row_group_rows (batches of 300 sliced at their
    boundaries), while two writers (a load's tables) write at once."""
    schema = pa.schema([("id", pa.int64())])
    writers = [
        PartWriter(
            open_lake(tmp_path / "lake"),
            f"t{n}/loaded_date=2026-11-24/load-1",
            schema,
            part_rows=2_000,
            row_group_rows=500,
        )
        for n in range(2)
    ]
    for start in range(0, 9_000, 300):
        for writer in writers:
            writer.write(pa.record_batch([pa.array(range(start, start + 300))], schema=schema))
    for writer in writers:
        parts = writer.finish()
        assert [part.rows for part in parts] == [2_000, 2_000, 2_000, 2_000, 1_000]
        files = [pq.ParquetFile(tmp_path / "lake" / part.path) for part in parts]
        assert [f.metadata.num_row_groups for f in files] == [4, 4, 4, 4, 2]
        assert {f.metadata.row_group(i).num_rows for f in files for i in range(f.metadata.num_row_groups)} == {500}
        assert [i for f in files for i in f.read().column("id").to_pylist()] == list(range(9_000))
