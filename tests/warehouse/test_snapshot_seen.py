"""A complete snapshot writes only the rows it changes; its load record says it saw the rest (lms._snapshot_seen,
pipeline/warehouse/merge/seen.py). When a row was last seen stays what it was, derived instead of written, and
holds after a rebuild from the lake and after a roll-forward of an interrupted commit."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from warehouse_helpers import ALL_SPECS, GROUPS, dump, load_once, make_warehouse

from pipeline.warehouse import (
    Warehouse,
    content_versions,
    last_seen_sql,
    on_point,
    read_table_def,
    rebuild_into,
    snapshot_seen,
)

SNAPSHOT = {"groups"}


def groups(wh: Warehouse, ids: str, *, complete: bool = True, **titles: str) -> Any:
    """One load of lms.groups holding the groups of `ids` ("g1 g2"), titled by `titles` or their id."""
    rows = [{"id": gid, "title": titles.get(gid, gid.upper()), "disabled": False} for gid in ids.split()]
    return load_once(wh, "groups", [(GROUPS, rows)], complete_snapshots=SNAPSHOT if complete else set())


def stamps(wh: Warehouse) -> dict[str, tuple[datetime, datetime | None]]:
    """id -> (last_loaded_at, deleted_at) of every group."""
    with wh.connect(read_only=True) as conn:
        found = conn.execute("SELECT id, last_loaded_at, deleted_at FROM lms.groups").fetchall()
    return {sid: (loaded, deleted) for sid, loaded, deleted in found}


def last_seen(wh: Warehouse) -> dict[str, datetime]:
    with wh.connect(read_only=True) as conn:
        table = read_table_def(conn, "groups")
        assert table is not None
        return dict(conn.execute(f"SELECT id, last_seen_at FROM ({last_seen_sql(table)})").fetchall())


def seen_marker(wh: Warehouse) -> tuple[int, datetime] | None:
    with wh.connect(read_only=True) as conn:
        return snapshot_seen(conn, "groups")


def versions(wh: Warehouse) -> dict[str, int]:
    with wh.connect(read_only=True) as conn:
        return content_versions(conn, ["groups"])


def history(wh: Warehouse) -> list[Any]:
    """g9 vanishes in the second load, which the next two repeat; the fifth renames g2 and loses g3; the sixth,
    not complete (a sweep cut short), sees g1 alone."""
    wh.ensure_tables(ALL_SPECS)
    return [
        groups(wh, "g1 g2 g3 g9"),
        groups(wh, "g1 g2 g3"),
        groups(wh, "g1 g2 g3"),
        groups(wh, "g1 g2 g3"),
        groups(wh, "g1 g2", g2="renamed"),
        groups(wh, "g1", complete=False),
    ]


def test_a_repeated_snapshot_writes_no_row_and_its_record_says_it_saw_them(seeded: Warehouse) -> None:
    first = groups(seeded, "g1 g2 g3")
    before = dump(seeded, ("groups",))
    again = groups(seeded, "g1 g2 g3")
    assert again.repeat_of == first.seq
    assert again.tables["groups"].unchanged == 3
    assert dump(seeded, ("groups",)) == before  # every column of every row, last_loaded_at included
    assert seen_marker(seeded) == (again.seq, again.loaded_at)
    assert versions(seeded) == {"groups": first.seq}  # the data did not change since the first load
    assert last_seen(seeded) == dict.fromkeys(("g1", "g2", "g3"), again.loaded_at)


def test_a_snapshot_that_changed_one_row_writes_that_row_alone(seeded: Warehouse) -> None:
    first = groups(seeded, "g1 g2 g3")
    changed = groups(seeded, "g1 g2 g3", g3="renamed")
    assert changed.repeat_of is None
    assert changed.tables["groups"].updated == 1
    assert stamps(seeded) == {
        "g1": (first.loaded_at, None),
        "g2": (first.loaded_at, None),
        "g3": (changed.loaded_at, None),
    }
    assert seen_marker(seeded) == (changed.seq, changed.loaded_at)
    assert versions(seeded) == {"groups": changed.seq}
    assert last_seen(seeded) == dict.fromkeys(("g1", "g2", "g3"), changed.loaded_at)


def written_by(loads: list[Any]) -> dict[str, tuple[datetime, datetime | None]]:
    """The history's (last_loaded_at, deleted_at) per group: rows are written when they change, never when only
    seen again (by a repeat, or by the load that was not complete)."""
    at = [load.loaded_at for load in loads]
    return {"g1": (at[0], None), "g2": (at[4], None), "g3": (at[0], at[4]), "g9": (at[0], at[1])}


def test_last_seen_is_the_newest_load_that_saw_the_row_live_or_deleted(seeded: Warehouse) -> None:
    loads = history(seeded)
    assert [load.repeat_of is not None for load in loads] == [False, False, True, True, False, False]
    at = [load.loaded_at for load in loads]
    assert stamps(seeded) == written_by(loads)
    # g3 was last seen by the last repeat, g9 by the first load; g1's sighting by the incomplete load is not
    # recorded (which rows a cut-short sweep reads is no statement about the platform), the complete one's is
    assert last_seen(seeded) == {"g1": at[4], "g2": at[4], "g3": at[3], "g9": at[0]}
    assert seen_marker(seeded) == (loads[4].seq, at[4])  # the newest complete snapshot
    assert versions(seeded) == {"groups": loads[4].seq}


def test_the_ordinary_apply_gives_the_same_rows_as_a_repeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repeated = make_warehouse(tmp_path / "repeated")
    history(repeated)
    monkeypatch.setattr("pipeline.warehouse.merge.apply.repeated_load", lambda *args: None)
    ordinary = make_warehouse(tmp_path / "ordinary")  # the same clock: the same load times
    loads = history(ordinary)
    assert [load.repeat_of for load in loads] == [None] * 6
    assert stamps(ordinary) == written_by(loads)  # its unchanged rows were not written either
    assert dump(ordinary, ("groups",)) == dump(repeated, ("groups",))
    assert last_seen(ordinary) == last_seen(repeated)


def test_a_rebuild_from_the_lake_reaches_the_same_rows_and_last_seen(tmp_path: Path) -> None:
    wh = make_warehouse(tmp_path / "data")
    loads = history(wh)
    rebuilt = make_warehouse(tmp_path / "copy")
    rebuild_into(wh.lake_dir, rebuilt.path, wh.connection_settings)
    assert dump(rebuilt) == dump(wh)  # every table, field for field, and the load records
    assert stamps(rebuilt) == written_by(loads)  # the replayed repeats wrote no row either
    assert last_seen(rebuilt) == last_seen(wh)
    assert seen_marker(rebuilt) == seen_marker(wh)
    assert versions(rebuilt) == versions(wh)


def test_a_repeat_rolled_forward_after_its_commit_was_cut_short(tmp_path: Path) -> None:
    """The manifest of a repeated snapshot is written, its DuckDB commit never happens: the next writer replays it
    and ends as the uninterrupted warehouse does."""
    wh, reference = make_warehouse(tmp_path / "cut"), make_warehouse(tmp_path / "reference")
    for target in (wh, reference):
        target.ensure_tables(ALL_SPECS)
        first = groups(target, "g1 g2 g3")

    def cut_after_manifest(point: str) -> None:
        if point == "manifest_written":
            raise KeyboardInterrupt("killed after the manifest")

    on_point(cut_after_manifest)
    try:
        with pytest.raises(KeyboardInterrupt):
            groups(wh, "g1 g2 g3")
    finally:
        on_point(None)
    assert seen_marker(wh) is not None and seen_marker(wh)[0] == 1  # DuckDB rolled back: the first load only
    assert wh.recover() == 1
    assert groups(reference, "g1 g2 g3").repeat_of == 1
    assert dump(wh, ("groups",)) == dump(reference, ("groups",))
    assert stamps(wh) == dict.fromkeys(("g1", "g2", "g3"), (first.loaded_at, None))  # the replay wrote no row
    assert last_seen(wh) == last_seen(reference)
    assert seen_marker(wh) == seen_marker(reference)
