"""A complete snapshot that repeats the last one is applied without comparing its rows (pipeline/warehouse/merge/repeats.py):
the tables end exactly as the ordinary apply leaves them, and anything that breaks the proof takes the ordinary path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from warehouse_helpers import (
    ALL_SPECS,
    ANSWERS,
    GROUPS,
    REGISTRATIONS,
    SESSIONS,
    T0,
    answer,
    batch,
    dump,
    load_once,
    make_warehouse,
)

from pipeline.warehouse import Warehouse, hooks
from pipeline.warehouse.lake.lake import list_manifests, read_manifest
from pipeline.warehouse.lake.manifest import from_json
from pipeline.warehouse.loading.content import ContentDigest
from pipeline.warehouse.merge.repeats import _keys_of
from pipeline.warehouse.results import TableLoadStats
from pipeline.warehouse.upkeep.rebuild import rebuild_into

SNAPSHOT = {"lesson_sessions", "lesson_session_registrations"}
SESSION_ROWS = [{"id": s, "title": s.upper(), "presenters": ["p1", s], "start_date": T0} for s in ("s1", "s2", "s3")]
REGISTRATION_ROWS = [{"session_id": s, "user_id": u, "status": "approved"} for s in ("s1", "s2") for u in ("u1", "u2")]


def sessions_load(
    wh: Warehouse,
    sessions: list[dict[str, Any]] = SESSION_ROWS,
    registrations: list[dict[str, Any]] = REGISTRATION_ROWS,
    **commit: Any,
) -> Any:
    commit.setdefault("complete_snapshots", SNAPSHOT)
    return load_once(wh, "lesson_sessions", [(SESSIONS, sessions), (REGISTRATIONS, registrations)], **commit)


def history(wh: Warehouse) -> list[Any]:
    """A snapshot with a row that later vanishes, the snapshot without it (rows marked deleted), then the same
    snapshot twice more: the last two repeat it."""
    wh.ensure_tables(ALL_SPECS)
    extra_session = {"id": "s9", "title": "gone", "presenters": [], "start_date": T0}
    extra_registration = {"session_id": "s1", "user_id": "u9", "status": "pending"}
    return [
        sessions_load(wh, [*SESSION_ROWS, extra_session], [*REGISTRATION_ROWS, extra_registration]),
        sessions_load(wh),
        sessions_load(wh),
        sessions_load(wh),
    ]


def user_tables(wh: Warehouse) -> dict[str, list[tuple]]:
    """Every row and column of the data tables (lms._load_runs holds random load ids: compared apart)."""
    return {name: rows for name, rows in dump(wh).items() if not name.startswith("_")}


def ordinary_apply_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pipeline.warehouse.merge.apply.repeated_load", lambda *args: None)


def test_a_repeated_snapshot_ends_exactly_as_the_ordinary_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repeated = make_warehouse(tmp_path / "repeated")
    results = history(repeated)
    assert [r.repeat_of for r in results] == [None, None, results[1].seq, results[2].seq]
    assert results[3].tables == {
        "lesson_sessions": TableLoadStats(fetched=3, unchanged=3),
        "lesson_session_registrations": TableLoadStats(fetched=4, unchanged=4),
    }

    ordinary_apply_only(monkeypatch)
    ordinary = make_warehouse(tmp_path / "ordinary")  # the same clock: the same load times
    expected = history(ordinary)
    assert [r.repeat_of for r in expected] == [None] * 4
    assert [r.tables for r in results] == [r.tables for r in expected]
    assert user_tables(repeated) == user_tables(ordinary)
    with repeated.connect(read_only=True) as conn:  # written by the first load only; s9 marked by the second
        stamps = conn.execute("SELECT id, last_loaded_at, deleted_at FROM lms.lesson_sessions ORDER BY id").fetchall()
    assert stamps[:3] == [(s, results[0].loaded_at, None) for s in ("s1", "s2", "s3")]
    assert stamps[3] == ("s9", results[0].loaded_at, results[1].loaded_at)


def test_the_order_batches_arrive_in_does_not_count(seeded: Warehouse) -> None:
    """Snapshot pages come back in any order when fetched concurrently; equal copies of a key are fine too."""
    users = [{"id": "g1", "title": "A"}, {"id": "g2", "title": "B"}, {"id": "g1", "title": "A"}]
    first = load_once(seeded, "groups", [(GROUPS, users[:1]), (GROUPS, users[1:])], complete_snapshots={"groups"})
    again = load_once(seeded, "groups", [(GROUPS, users[1:]), (GROUPS, users[:1])], complete_snapshots={"groups"})
    assert again.repeat_of == first.seq
    assert again.tables["groups"] == TableLoadStats(fetched=3, unchanged=2)


def test_a_repeat_of_a_repeat_takes_its_keys_from_the_record_not_the_parts(seeded: Warehouse) -> None:
    """Rows listed twice (a user in two groups): the first repeat reads its parts to count their keys and records
    the count; the next repeat of the same rows takes it from there, its parts unread."""
    users = [{"id": "g1", "title": "A"}, {"id": "g2", "title": "B"}, {"id": "g1", "title": "A"}]
    results = [
        load_once(seeded, "groups", [(GROUPS, users[:2]), (GROUPS, users[2:])], complete_snapshots={"groups"})
        for _ in range(3)
    ]
    assert [r.repeat_of for r in results] == [None, results[0].seq, results[1].seq]
    with seeded.connect(read_only=True) as conn:
        recorded = [
            json.loads(tables)["groups"]
            for (tables,) in conn.execute("SELECT tables FROM lms._load_runs ORDER BY load_seq").fetchall()
        ]
    assert [counts.get("keys") for counts in recorded] == [None, 2, 2]
    table = load_plan_table(seeded, results[2].seq)
    unreadable = [str(seeded.lake_dir / "no-such-part.parquet")]  # read, it would raise
    with seeded.connect(read_only=True) as conn:
        assert _keys_of(conn, table, unreadable, recorded[1]) == 2
        with pytest.raises(duckdb.IOException):
            _keys_of(conn, table, unreadable, recorded[0])  # an ordinary load's counts: the parts are read


def load_plan_table(wh: Warehouse, seq: int) -> Any:
    """The groups table of load `seq` as its manifest has it."""
    ref = next(ref for number, ref in list_manifests(wh.lake) if number == seq)
    plan, _ = from_json(read_manifest(wh.lake, ref), ref.where)
    return next(table for table in plan.tables if table.name == "groups")


def test_a_key_with_two_different_rows_takes_the_ordinary_apply(seeded: Warehouse) -> None:
    """The same batches in another order: the same digest, but the dedupe's winner (the row written last) differs."""
    first, twin = {"id": "g1", "title": "first"}, {"id": "g1", "title": "twin"}
    load_once(seeded, "groups", [(GROUPS, [first]), (GROUPS, [twin])], complete_snapshots={"groups"})
    again = load_once(seeded, "groups", [(GROUPS, [twin]), (GROUPS, [first])], complete_snapshots={"groups"})
    assert again.repeat_of is None
    with seeded.connect(read_only=True) as conn:
        assert conn.execute("SELECT title FROM lms.groups").fetchall() == [("first",)]


@pytest.mark.parametrize(
    "case",
    [
        "a value changed",
        "previous not complete",
        "this one not complete",
        "another load wrote the table",
        "rows changed outside a load",
        "a table missing",
    ],
)
def test_anything_that_breaks_the_proof_takes_the_ordinary_apply(seeded: Warehouse, case: str) -> None:
    sessions, registrations, commit = SESSION_ROWS, REGISTRATION_ROWS, {}
    sessions_load(seeded, complete_snapshots=set() if case == "previous not complete" else SNAPSHOT)
    if case == "a value changed":
        sessions = [*SESSION_ROWS[:2], {**SESSION_ROWS[2], "title": "renamed"}]
    elif case == "this one not complete":
        commit = {"complete_snapshots": set()}
    elif case == "another load wrote the table":
        load_once(seeded, "backfill", [(SESSIONS, [{**SESSION_ROWS[0], "title": "other"}])])
    elif case == "rows changed outside a load":
        with seeded.connect(read_only=False) as conn:
            conn.execute("DELETE FROM lms.lesson_sessions WHERE id = 's3'")
    elif case == "a table missing":
        registrations = []
    result = sessions_load(seeded, sessions, registrations, **commit)
    assert result.repeat_of is None
    with seeded.connect(read_only=True) as conn:
        live = conn.execute("SELECT id, title FROM lms.lesson_sessions WHERE deleted_at IS NULL ORDER BY id").fetchall()
    if case == "another load wrote the table":
        assert live[0] == ("s1", "S1")  # the snapshot's value again, not the backfill's
    if case == "rows changed outside a load":
        assert ("s3", "S3") in live  # the ordinary apply put it back
    if case == "a value changed":
        assert live[2] == ("s3", "renamed")


def test_a_rebuild_reproduces_a_repeated_snapshot(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "data")
    assert history(wh)[-1].repeat_of is not None
    rebuilt = make_warehouse(tmp_path / "copy")
    rebuild_into(wh.lake_dir, rebuilt.path, wh.connection_settings)
    assert dump(rebuilt) == dump(wh)  # load records included: the manifests carry the digests


def test_a_repeat_names_the_parts_it_repeats_and_adds_no_copy_to_the_lake(tmp_path: Path) -> None:
    """The repeats' manifests name the second load's parts (the rows they repeat), their own folders are gone, every
    named part is there, and a rebuild from those manifests ends exactly where the warehouse is."""
    wh = make_warehouse(tmp_path / "data")
    results = history(wh)
    plans = {seq: from_json(read_manifest(wh.lake, ref), ref.where)[0] for seq, ref in list_manifests(wh.lake)}

    def parts(seq: int) -> dict[str, tuple[str, ...]]:
        return {table.name: tuple(part.path for part in table.parts) for table in plans[seq].tables}

    second, *repeats = (result.seq for result in results[1:])
    assert [parts(seq) for seq in repeats] == [parts(second)] * 2
    assert all(f"/{results[1].load_id}/" in path for paths in parts(second).values() for path in paths)
    stored = {str(path.relative_to(wh.lake_dir)) for path in wh.lake_dir.rglob("*.parquet")}
    assert {path for seq in plans for paths in parts(seq).values() for path in paths} == stored
    assert not [path for path in stored if any(f"/{r.load_id}/" in path for r in results[2:])]
    rebuilt = make_warehouse(tmp_path / "copy")
    rebuild_into(wh.lake_dir, rebuilt.path, wh.connection_settings)
    assert dump(rebuilt) == dump(wh)


def test_a_repeat_cut_off_after_its_manifest_is_rolled_forward_from_the_parts_it_names(tmp_path: Path) -> None:
    """The repeat's manifest is written (it names the parts of the load it repeats), its DuckDB commit never
    happens; the next writer replays that manifest and ends where the repeat committed whole would have."""
    wh = make_warehouse(tmp_path / "cut")
    whole = make_warehouse(tmp_path / "whole")
    for warehouse in (wh, whole):
        history(warehouse)  # its last two loads repeat the second

    def cut(point: str) -> None:
        if point == "manifest_written":
            raise RuntimeError("cut off after the manifest")

    hooks.on_point(cut)
    try:
        with pytest.raises(RuntimeError, match="cut off"):
            sessions_load(wh)
    finally:
        hooks.on_point(None)
    repeated = sessions_load(whole)
    assert repeated.repeat_of is not None
    [(seq, ref)] = list_manifests(wh.lake)[-1:]
    plan, _ = from_json(read_manifest(wh.lake, ref), ref.where)
    named = [part.path for table in plan.tables for part in table.parts]
    assert seq == repeated.seq and named and not [path for path in named if f"/{plan.load_id}/" in path]
    wh.ensure_tables(ALL_SPECS)  # the next writer rolls the load forward
    assert user_tables(wh) == user_tables(whole)
    with wh.connect(read_only=True) as cut_conn, whole.connect(read_only=True) as whole_conn:
        runs = "SELECT load_seq, stream, tables FROM lms._load_runs ORDER BY load_seq"
        assert cut_conn.execute(runs).fetchall() == whole_conn.execute(runs).fetchall()


def test_a_repeat_keeps_its_own_parts_when_those_it_repeats_are_damaged_or_unreadable(seeded: Warehouse) -> None:
    rows = [{"id": "g1", "title": "A"}, {"id": "g2", "title": "B"}]
    first = load_once(seeded, "groups", [(GROUPS, rows)], complete_snapshots={"groups"})
    [part] = load_plan_table(seeded, first.seq).parts
    (seeded.lake_dir / part.path).write_bytes(b"not the part any more")
    again = load_once(seeded, "groups", [(GROUPS, rows)], complete_snapshots={"groups"})
    assert again.repeat_of == first.seq
    [own] = load_plan_table(seeded, again.seq).parts
    assert f"/{again.load_id}/" in own.path and (seeded.lake_dir / own.path).stat().st_size == own.bytes
    manifest = next(ref for seq, ref in list_manifests(seeded.lake) if seq == again.seq)
    (seeded.lake_dir / "_loads" / manifest.name).write_bytes(b"{not a manifest")
    third = load_once(seeded, "groups", [(GROUPS, rows)], complete_snapshots={"groups"})
    assert third.repeat_of == again.seq  # the manifest it repeats is unreadable: it commits, with its own parts
    assert f"/{third.load_id}/" in load_plan_table(seeded, third.seq).parts[0].path


def test_loads_of_other_kinds_carry_no_digest(seeded: Warehouse) -> None:
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])])
    load_once(seeded, "groups", [(GROUPS, [{"id": "g1"}])], complete_snapshots={"groups"})
    with seeded.connect(read_only=True) as conn:
        tables = [
            (stream, json.loads(written))
            for stream, written in conn.execute(
                "SELECT stream, tables FROM lms._load_runs ORDER BY load_seq"
            ).fetchall()
        ]
    assert "content" not in tables[0][1]["answers"]
    assert tables[1][0] == "groups" and len(tables[1][1]["groups"]["content"]) == 32


def test_same_digest_for_the_same_rows_built_apart() -> None:
    digests = []
    for _ in range(2):
        content = ContentDigest(SESSIONS.schema)
        content.add(batch(SESSIONS, SESSION_ROWS))
        digests.append(content.hexdigest())
    changed = ContentDigest(SESSIONS.schema)
    changed.add(batch(SESSIONS, [*SESSION_ROWS[:2], {**SESSION_ROWS[2], "presenters": ["p1"]}]))
    assert digests[0] == digests[1] != changed.hexdigest()


def test_a_file_from_before_the_digests_repeats_once_a_load_recorded_one(seeded: Warehouse) -> None:
    """Loads recorded by an older version carry no digest: the next load is applied the ordinary way."""
    first = sessions_load(seeded)
    with seeded.connect(read_only=False) as conn:
        written = json.loads(conn.execute("SELECT tables FROM lms._load_runs").fetchone()[0])
        old = {table: {k: v for k, v in counts.items() if k != "content"} for table, counts in written.items()}
        conn.execute("UPDATE lms._load_runs SET tables = ?", [json.dumps(old)])
    assert sessions_load(seeded).repeat_of is None
    assert sessions_load(seeded).repeat_of == first.seq + 1


def test_the_previous_version_can_still_write_the_file(seeded: Warehouse) -> None:
    """A rolled-back deployment keeps running: its INSERT into lms._load_runs names no columns."""
    sessions_load(seeded)
    with seeded.connect(read_only=False) as conn:
        conn.execute(
            "INSERT INTO lms._load_runs VALUES (99, 'x', 's', 'r', now(), now(), NULL, NULL, NULL, [], '{}', '{}')"
        )
