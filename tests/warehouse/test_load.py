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

from pipeline.warehouse import SchemaError, TableLoadStats, Warehouse, WarehouseError
from pipeline.warehouse.lake import list_manifests


def lake_files(wh: Warehouse) -> list[str]:
    return sorted(p.relative_to(wh.lake_dir).as_posix() for p in wh.lake_dir.rglob("*") if p.is_file())


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
        f"{prefix}/part-000000.parquet", f"{prefix}/part-000001.parquet",
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
    with pytest.raises(RuntimeError, match="network gone"):
        with seeded.load("answers", "run-2", T0) as load:
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
        load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1", minutes=9, valid=False), answer("a9", "q1")])],
                  cursor=T0 + timedelta(hours=1), complete_snapshots={"answers"})
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
        runs = conn.execute("SELECT load_seq, cursor_requested, cursor_before, cursor_after FROM lms._load_runs "
                            "ORDER BY 1").fetchall()
    assert runs[1] == (2, T0, T0 + timedelta(hours=2), T0 + timedelta(hours=2))


def test_rerunning_a_window_is_idempotent(seeded: Warehouse) -> None:
    window = [(ANSWERS, [answer("a1", "q1"), answer("a2", "q1", tags=["x"])]),
              (ANSWER_RESULTS, [result("a1", "q1", 0, "x"), result("a1", "q1", 1, "y")])]
    load_once(seeded, "answers", window, cursor=T0)
    first = dump(seeded, ("answers", "answer_results"))
    again = load_once(seeded, "answers", window, cursor=T0)
    assert again.tables == {"answers": TableLoadStats(fetched=2, unchanged=2),
                            "answer_results": TableLoadStats(fetched=2, unchanged=2)}
    second = dump(seeded, ("answers", "answer_results"))

    def without_last_loaded(table: list[tuple], position: int) -> list[tuple]:
        return [row[:position] + row[position + 1:] for row in table]

    # same rows, same first_loaded_at; only last_loaded_at moved
    assert without_last_loaded(second["answers"], 10) == without_last_loaded(first["answers"], 10)
    assert without_last_loaded(second["answer_results"], 6) == without_last_loaded(first["answer_results"], 6)
    assert {row[10] for row in second["answers"]} == {again.loaded_at}


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
    with pytest.raises(WarehouseError, match="JSON-serializable"):
        with wh.load("answers", "run", T0) as load:
            load.commit(stats={"when": T0})
    assert [seq for seq, _ in list_manifests(wh.lake_dir)] == [1]
