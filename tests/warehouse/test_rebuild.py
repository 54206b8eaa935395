"""`lessonsync rebuild`: the lake alone rebuilds the warehouse exactly, every table and every column,
load metadata and sync state included."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from warehouse_helpers import (
    ALL_SPECS,
    ANSWER_RESULTS,
    ANSWERS,
    GROUPS,
    QUARANTINE,
    REGISTRATIONS,
    SESSIONS,
    T0,
    answer,
    dump,
    load_once,
    make_warehouse,
    result,
)

from pipeline.cli import main as lessonsync
from pipeline.warehouse import LakeError, Warehouse, WarehouseError
from pipeline.warehouse.duck.catalog import read_catalog
from pipeline.warehouse.upkeep.rebuild import rebuild_into


def history(wh: Warehouse) -> None:
    """Loads touching every rule: dedupe, updates, lists, JSON, stale rows, snapshots with deletions and
    revivals, child replacement, schema evolution, appends and a backfill cursor."""
    wh.ensure_tables(ALL_SPECS)
    load_once(
        wh,
        "answers",
        [
            (ANSWERS, [answer("a1", "q1", tags=["x"]), answer("a2", "q1", validation='{"s": 1}'), answer("a1", "q1")]),
            (ANSWER_RESULTS, [result("a1", "q1", 0, "x"), result("a1", "q1", 1, "y"), result("a2", "q1", 0, "z")]),
            (QUARANTINE, [{"seen_at": T0, "stream": "answers", "raw": "[1]"}]),
        ],
        cursor=T0,
    )
    sessions = [{"id": s, "title": s, "presenters": ["p1"], "start_date": T0} for s in ("s1", "s2")]
    registrations = [{"session_id": s, "user_id": u, "status": "approved"} for s in ("s1", "s2") for u in ("u1", "u2")]
    load_once(
        wh,
        "lesson_sessions",
        [(SESSIONS, sessions), (REGISTRATIONS, registrations)],
        complete_snapshots={"lesson_sessions", "lesson_session_registrations"},
    )
    load_once(wh, "groups", [(GROUPS, [{"id": "g1"}, {"id": "g2"}])], complete_snapshots={"groups"})
    load_once(wh, "groups", [(GROUPS, [{"id": "g1", "title": "one"}])], complete_snapshots={"groups"})
    evolved = dataclasses.replace(ANSWERS, schema=ANSWERS.schema.append(pa.field("feedback", pa.string())))
    load_once(
        wh,
        "answers",
        [
            (
                evolved,
                [{**answer("a1", "q1", minutes=5, tags=["x", "y"]), "feedback": "ok"}, answer("a3", "q2", minutes=5)],
            ),
            (ANSWER_RESULTS, [result("a1", "q1", 1, "y2")]),
        ],
        cursor=T0 + timedelta(hours=1),
    )
    load_once(wh, "answers", [(ANSWERS, [answer("a2", "q1", minutes=-30)])], cursor=T0 - timedelta(days=3))
    load_once(
        wh,
        "lesson_sessions",
        [(SESSIONS, sessions[:1] + [{**sessions[1], "presenters": ["p2", "p3"]}]), (REGISTRATIONS, registrations[:3])],
        complete_snapshots={"lesson_sessions", "lesson_session_registrations"},
    )
    load_once(wh, "groups", [(GROUPS, [{"id": "g1", "title": "one"}, {"id": "g2"}])], complete_snapshots={"groups"})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory (warehouse + lake) holding `history`; tests work on copies of it."""
    data = tmp_path_factory.mktemp("recorded")
    history(make_warehouse(data))
    return data


@pytest.fixture
def wh(recorded: Path, tmp_path: Path) -> Warehouse:
    shutil.copytree(recorded, tmp_path / "data")
    return make_warehouse(tmp_path / "data")


def layout(wh: Warehouse) -> tuple:
    with wh.connect(read_only=True) as conn:
        return read_catalog(conn)


def test_rebuild_from_the_lake_equals_the_warehouse(wh: Warehouse, tmp_path: Path) -> None:
    rebuilt = make_warehouse(tmp_path / "copy")
    report = rebuild_into(wh.lake_dir, rebuilt.path, wh.connection_settings)
    assert report.loads == 8 and report.rows["answers"] == 3
    original = dump(wh)
    assert set(original) >= {
        "answers",
        "answer_results",
        "groups",
        "lesson_sessions",
        "quarantine",
        "lesson_session_registrations",
        "_sync_state",
        "_load_runs",
        "_tables",
    }
    assert dump(rebuilt) == original
    assert layout(rebuilt) == layout(wh)  # same columns in the same order, same keys and registry facts
    deleted = {
        t: sum(1 for r in rows if r[-1] is not None)
        for t, rows in original.items()
        if t in ("groups", "answer_results", "lesson_session_registrations")
    }
    assert deleted == {"groups": 0, "answer_results": 1, "lesson_session_registrations": 1}


def test_rebuild_in_place_through_the_cli(
    wh: Warehouse, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = wh.path.parent
    before = dump(wh)
    for name in ("LESSONSYNC_DUCKDB_MEMORY_LIMIT", "LESSONSYNC_DUCKDB_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert lessonsync(["rebuild", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert f"rebuilt {wh.path} from 8 committed loads" in out and "lms.answers: 3 rows" in out
    assert dump(wh) == before
    assert dump(Warehouse(data / "warehouse.duckdb.before-rebuild", wh.lake_dir)) == before
    assert not (data / "warehouse.duckdb.rebuilt").exists()


def test_a_missing_lake_part_is_reported(wh: Warehouse, tmp_path: Path) -> None:
    victim = next(wh.lake_dir.glob("groups/*/*/part-000000.parquet"))
    victim.unlink()
    with pytest.raises(LakeError, match=rf"lake part {victim} of load \d+ .* is missing: the lake is damaged"):
        rebuild_into(wh.lake_dir, tmp_path / "other.duckdb", wh.connection_settings)
    assert not (tmp_path / "other.duckdb").exists()


def test_a_replay_that_disagrees_with_its_manifest_is_reported(wh: Warehouse, tmp_path: Path) -> None:
    manifest = sorted((wh.lake_dir / "_loads").glob("*.json"))[2]
    doc = json.loads(manifest.read_text())
    doc["outcome"]["tables"]["groups"]["inserted"] = 5
    manifest.write_text(json.dumps(doc))
    with pytest.raises(LakeError, match=r"replaying load 3 .* the warehouse and the lake have diverged"):
        rebuild_into(wh.lake_dir, tmp_path / "other.duckdb", wh.connection_settings)


def test_rebuild_refuses_an_existing_target_and_an_empty_lake(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "fresh")
    with pytest.raises(LakeError, match="has no committed loads"):
        rebuild_into(wh.lake_dir, tmp_path / "new.duckdb", wh.connection_settings)
    load_once(wh, "answers", [(ANSWERS, [answer("a1", "q1")])])
    with pytest.raises(WarehouseError, match="already exists"):
        rebuild_into(wh.lake_dir, wh.path, wh.connection_settings)
