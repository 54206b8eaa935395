"""The Iceberg mirror of the warehouse (pipeline/warehouse/lake/iceberg.py), load by load, each load followed by a
mirror run as the mirror step follows the commits: inserts, updates, soft deletions, child replacement, schema
evolution, a mirror run that failed, rows removed outside a load, snapshot expiry and compaction. After each step
every table read through pyiceberg and polars equals the warehouse."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from iceberg_helpers import assert_data_files_hold_the_tables_columns, assert_mirror_equals, open_catalog
from pyiceberg.table import Table
from warehouse_helpers import ALL_SPECS, ANSWER_RESULTS, ANSWERS, GROUPS, SESSIONS, answer, make_warehouse, result
from warehouse_helpers import load_once as load_only

from pipeline.contract.tables import TableSpec
from pipeline.raw.answer_versions import VERSIONS
from pipeline.warehouse import Warehouse
from pipeline.warehouse.lake.iceberg import (
    CONTENT_DIGEST,
    EMPTY_DIGEST,
    KEY_DIGEST,
    LOADED_THROUGH,
    ROW_DIGEST,
    CatalogUnavailable,
    IcebergLocation,
    IcebergMirror,
    MirrorStats,
    TableFormatError,
    maintain,
)


def load_once(wh: Warehouse, stream: str, tables: list, **commit: object) -> object:
    """One load, then a mirror run (what the mirror step does after a run's commits)."""
    loaded = load_only(wh, stream, tables, **commit)
    mirror_run(wh)
    return loaded


def mirror_run(wh: Warehouse) -> None:
    assert wh.table_mirror is not None
    with wh.connect() as conn:
        failed = [stats.error for stats in wh.table_mirror.sync_behind(conn) if stats.error]
    assert not failed, failed


def group(gid: str, title: str = "G", disabled: bool = False) -> dict:
    return {"id": gid, "title": title, "disabled": disabled}


def snapshot_id(where: IcebergLocation, table: str) -> int | None:
    snapshot = open_catalog(where).load_table(("lms", table)).current_snapshot()
    return snapshot.snapshot_id if snapshot else None


def sync_groups(mirrored: Warehouse, where, names: dict[str, str]) -> MirrorStats:
    """A complete snapshot of the groups `names` (id -> title) loaded and the raw tables mirrored, the mirror then
    equal to the warehouse: the groups' stats."""
    groups = [group(gid, title) for gid, title in names.items()]
    load_only(mirrored, "groups", [(GROUPS, groups)], complete_snapshots={"groups"})
    assert mirrored.table_mirror is not None
    with mirrored.connect() as conn:
        every = mirrored.table_mirror.sync_raw(conn)
    assert not [s.error for s in every if s.error]
    (stats,) = [s for s in every if s.table == "lms.groups"]
    assert_mirror_equals(mirrored.path, where)
    return stats


def test_snapshot_loads_inserts_updates_and_soft_deletes_are_mirrored(mirrored: Warehouse, where) -> None:
    snapshots = {"complete_snapshots": {"groups"}}
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2"), group("g3")])], **snapshots)
    assert assert_mirror_equals(mirrored.path, where)["groups"] == 3
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g3", "renamed")])], **snapshots)
    assert_mirror_equals(mirrored.path, where)  # g2 carries deleted_at, g3 its new title
    before = snapshot_id(where, "groups")
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g3", "renamed")])], **snapshots)
    assert snapshot_id(where, "groups") == before, "a load that changed nothing wrote a snapshot"
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2"), group("g3", "renamed")])], **snapshots)
    assert_mirror_equals(mirrored.path, where)  # g2 came back
    assert snapshot_id(where, "groups") != before


def test_child_replacement_and_incremental_updates_are_mirrored(mirrored: Warehouse, where) -> None:
    load_once(
        mirrored,
        "answers",
        [
            (ANSWERS, [answer("al1", "q1"), answer("al1", "q2"), answer("al2", "q1")]),
            (ANSWER_RESULTS, [result("al1", "q1", 0, "a"), result("al1", "q1", 1, "b"), result("al2", "q1", 0, "c")]),
        ],
    )
    assert_mirror_equals(mirrored.path, where)
    load_once(
        mirrored,
        "answers",
        [
            (ANSWERS, [answer("al1", "q1", valid=False, minutes=5)]),
            (ANSWER_RESULTS, [result("al1", "q1", 0, "changed")]),
        ],
    )
    counts = assert_mirror_equals(mirrored.path, where)
    assert counts["answer_results"] == 3  # the replaced child stays, marked deleted


def test_a_new_column_evolves_the_table_without_rewriting_its_rows(mirrored: Warehouse, where) -> None:
    load_once(mirrored, "groups", [(GROUPS, [group(f"g{i}") for i in range(5)])], complete_snapshots={"groups"})
    files_before = {f.file.file_path for f in open_catalog(where).load_table(("lms", "groups")).scan().plan_files()}
    wider = TableSpec(
        name=GROUPS.name,
        schema=GROUPS.schema.append(pa.field("region", pa.string())),
        key=GROUPS.key,
        kind=GROUPS.kind,
        description=GROUPS.description,
    )
    rows = [{**group(f"g{i}"), "region": None} for i in range(5)]
    load_once(mirrored, "groups", [(wider, rows)], complete_snapshots={"groups"})
    table = open_catalog(where).load_table(("lms", "groups"))
    assert "region" in table.schema().column_names
    assert {f.file.file_path for f in table.scan().plan_files()} == files_before, "unchanged rows were rewritten"
    assert_mirror_equals(mirrored.path, where)
    rows[0]["region"] = "eu"
    load_once(mirrored, "groups", [(wider, rows)], complete_snapshots={"groups"})
    assert_mirror_equals(mirrored.path, where)


def test_a_failed_mirror_run_leaves_the_load_committed_and_the_next_run_rolls_it_forward(tmp_path: Path, where) -> None:
    class Failing(IcebergMirror):
        def sync_raw(self, conn, names=None, *, verify_files=False):  # the catalog cannot be used
            raise CatalogUnavailable("simulated")

    wh = make_warehouse(tmp_path, table_mirror=Failing(where))
    wh.ensure_tables(ALL_SPECS)
    load_only(wh, "groups", [(GROUPS, [group("g1"), group("g2")])], complete_snapshots={"groups"})
    with pytest.raises(TableFormatError):
        mirror_run(wh)
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM lms.groups").fetchone() == (2,)  # the load stays committed
    healthy = make_warehouse(tmp_path, table_mirror=IcebergMirror(where), clock=wh.clock)
    load_once(healthy, "answers", [(ANSWERS, [answer("al1", "q1")])])
    counts = assert_mirror_equals(healthy.path, where)
    assert counts["groups"] == 2  # the groups load the failed mirror missed


def test_rows_removed_outside_a_load_are_removed_from_the_mirror(mirrored: Warehouse, where) -> None:
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2")])], complete_snapshots={"groups"})
    with mirrored.connect() as conn:
        conn.execute("DELETE FROM lms.groups WHERE id = 'g1'")  # as `lessonsync reset` or a hand repair would
    load_once(mirrored, "groups", [(GROUPS, [group("g2"), group("g3")])], complete_snapshots={"groups"})
    assert assert_mirror_equals(mirrored.path, where)["groups"] == 2


def test_expiry_keeps_the_current_snapshot_and_compaction_keeps_the_rows(mirrored: Warehouse, where) -> None:
    for i in range(4):  # one group added a load: each load appends a file
        rows = [group(f"g{j}") for j in range(10 + i)]
        load_once(mirrored, "groups", [(GROUPS, rows)], complete_snapshots={"groups"})
    mirror = mirrored.table_mirror
    assert mirror is not None
    table = open_catalog(where).load_table(("lms", "groups"))
    assert len(table.snapshots()) > 1
    expired = mirror.expire_snapshots(timedelta(0))
    assert expired["lms.groups"] > 0
    table = table.refresh()
    assert [s.snapshot_id for s in table.snapshots()] == [table.current_snapshot().snapshot_id]
    with mirrored.connect() as conn:
        compacted = mirror.compact(conn, min_files=2)
    assert compacted["groups"] == 4
    assert len(list(open_catalog(where).load_table(("lms", "groups")).scan().plan_files())) == 1
    assert_mirror_equals(mirrored.path, where)


def test_a_table_written_with_stored_digests_loses_them_and_keeps_its_files(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier versions stored each row's key and row digests as two fields. The next run drops the fields (their
    old data files stay as they are, readable), and compares a change with digests computed from the rows."""
    from pyiceberg.types import LongType

    from pipeline.warehouse.lake import iceberg

    monkeypatch.setattr(iceberg, "REWRITE_FRACTION", 1.0)  # new rows are appended, however many

    load_once(mirrored, "groups", [(GROUPS, [group(f"g{i}") for i in range(5)])], complete_snapshots={"groups"})
    assert_data_files_hold_the_tables_columns(where, ("groups",))
    table = open_catalog(where).load_table(("lms", "groups"))
    through = table.current_snapshot().summary[LOADED_THROUGH]
    with table.update_schema() as update:  # the layout an earlier version wrote
        update.add_column(KEY_DIGEST, LongType())
        update.add_column(ROW_DIGEST, LongType())
    table = table.refresh()
    rows = table.scan().to_arrow()
    digests = pa.array(range(rows.num_rows), pa.int64())
    old_layout = rows.set_column(rows.schema.get_field_index(KEY_DIGEST), KEY_DIGEST, digests)
    old_layout = old_layout.set_column(old_layout.schema.get_field_index(ROW_DIGEST), ROW_DIGEST, digests)
    table.overwrite(old_layout, snapshot_properties={LOADED_THROUGH: through})
    old_files = {task.file.file_path for task in table.refresh().scan().plan_files()}

    # new rows go into a file of their own: the old one, then under half the rows, is kept through a change
    load_once(mirrored, "groups", [(GROUPS, [group(f"g{i}") for i in range(20)])], complete_snapshots={"groups"})
    table = open_catalog(where).load_table(("lms", "groups"))
    assert KEY_DIGEST not in table.schema().column_names and ROW_DIGEST not in table.schema().column_names
    assert old_files < {task.file.file_path for task in table.scan().plan_files()}, "the old file was rewritten"
    assert_mirror_equals(mirrored.path, where)

    renamed = [group("g0", "renamed"), *(group(f"g{i}") for i in range(1, 20))]
    load_only(mirrored, "groups", [(GROUPS, renamed)], complete_snapshots={"groups"})
    assert mirrored.table_mirror is not None
    with mirrored.connect() as conn:
        (stats,) = [s for s in mirrored.table_mirror.sync_raw(conn) if s.table == "lms.groups"]
    assert not stats.error and not stats.rewritten
    assert (stats.keys_deleted, stats.rows_written) == (1, 1), "only the changed row is written anew"
    assert_mirror_equals(mirrored.path, where)


def test_of_the_older_rows_a_load_touched_only_those_whose_values_changed_are_written(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A written older row is compared with its row in the data files by digests computed from both sides, a list,
    a timestamp, a float, JSON and a NULL among the values: the row changed and changed back since the mirror's
    last sync is not written again."""
    from pipeline.warehouse.lake import iceberg

    monkeypatch.setattr(iceberg, "REWRITE_FRACTION", 1.0)  # the files are rewritten, not the table, however small
    monkeypatch.setattr(iceberg, "REWRITE_FRACTION_OF_FILES", 1.0)
    rows = [
        answer("al1", "q1", 1.5, tags=["a", "b"], validation='{"rule": "x"}'),
        answer("al2", "q1", tags=["c"], valid=None),
    ]
    load_once(mirrored, "answers", [(ANSWERS, rows)])
    load_only(mirrored, "answers", [(ANSWERS, [answer("al1", "q1", 1.5, tags=["a"], validation='{"rule": "y"}')])])
    load_only(mirrored, "answers", [(ANSWERS, [rows[0], answer("al2", "q1", tags=["c", "d"], valid=None)])])
    with mirrored.connect() as conn:
        written = conn.execute("SELECT count(*) FROM lms.answers WHERE last_loaded_at > first_loaded_at").fetchone()
        assert written == (2,)  # both rows written since the mirror's last sync: both are candidates
        assert mirrored.table_mirror is not None
        (stats,) = [s for s in mirrored.table_mirror.sync_raw(conn) if s.table == "lms.answers"]
    assert (stats.error, stats.rewritten, stats.keys_deleted, stats.rows_written) == ("", False, 1, 1)
    assert_mirror_equals(mirrored.path, where)


@pytest.fixture
def per_file(monkeypatch: pytest.MonkeyPatch) -> int:
    """Data files of this many rows (BATCH_ROWS): DuckDB writes a row group of at least one vector of rows."""
    from pipeline.warehouse.lake import iceberg

    monkeypatch.setattr(iceberg, "BATCH_ROWS", 2048)
    return 2048


def test_changed_keys_in_most_files_rewrite_the_table_whole_and_in_a_few_only_those_files(
    mirrored: Warehouse, where, per_file: int
) -> None:
    names = {f"g{j:05d}": "G" for j in range(5 * per_file)}  # five files

    def sync(renamed: list[str]) -> MirrorStats:
        names.update({gid: "renamed" for gid in renamed})
        return sync_groups(mirrored, where, names)

    sync([])

    def files_by_group() -> dict[str, str]:
        paths = [task.file.file_path for task in open_catalog(where).load_table(("lms", "groups")).scan().plan_files()]
        rows = duckdb.sql(
            "SELECT id, filename FROM read_parquet($paths, filename = true)",
            params={"paths": [p.removeprefix("file://") for p in paths]},
        ).fetchall()
        return dict(rows)

    first = files_by_group()
    assert len(set(first.values())) == 5
    one_file = sync([sorted(first)[0]])  # one key of one file: a fifth of the rows in the files it is in
    assert (one_file.rewritten, one_file.keys_deleted, one_file.rows_written) == (False, 1, 1)
    after = files_by_group()
    assert len(set(after.values())) == 6, "only the file holding the changed key is rewritten"
    by_file: dict[str, list[str]] = {}
    for gid, name in sorted(after.items()):
        by_file.setdefault(name, []).append(gid)
    scattered = [gids[0] for gids in by_file.values() if len(gids) == per_file][:3]  # their files: 3/5 of the rows
    assert len(scattered) == 3
    whole = sync(scattered)
    assert whole.rewritten and whole.rows_written == 5 * per_file


def test_changes_the_loads_counted_in_every_file_rewrite_the_table_without_comparing_its_rows(
    mirrored: Warehouse, where, per_file: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.warehouse.lake import iceberg

    names = {f"g{j:05d}": "G" for j in range(5 * per_file)}  # five files
    sync_groups(mirrored, where, names)
    names.update({gid: "renamed" for gid in sorted(names)[::50]})  # 205 changed keys, ~41 a file

    reads: list[int] = []  # the files each read of the files' keys reads
    file_keys = iceberg._file_keys

    def counted(conn: duckdb.DuckDBPyConnection, files, *args: object) -> str:
        reads.append(len(files))
        return file_keys(conn, files, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(iceberg, "_file_keys", counted)
    stats = sync_groups(mirrored, where, names)
    assert stats.rewritten and stats.rows_written == 5 * per_file
    assert reads == [5], "only the look-up of the files holding a touched key, no comparison of their rows"


def test_a_data_file_holds_its_rows_in_row_groups_of_at_most_row_group_rows(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.warehouse.lake import iceberg

    group_rows = 2048  # DuckDB writes a row group of at least one vector of rows
    monkeypatch.setattr(iceberg, "ROW_GROUP_ROWS", group_rows)
    monkeypatch.setattr(iceberg, "BATCH_ROWS", 2 * group_rows)
    sync_groups(mirrored, where, {f"g{j:05d}": "G" for j in range(5 * group_rows)})
    paths = [task.file.file_path for task in open_catalog(where).load_table(("lms", "groups")).scan().plan_files()]
    layout = []
    for path in paths:
        footer = pq.ParquetFile(path.removeprefix("file://")).metadata
        layout.append([footer.row_group(g).num_rows for g in range(footer.num_row_groups)])
    assert sorted(layout) == [[group_rows]] + [[group_rows, group_rows]] * 2


def test_a_change_of_two_columns_holding_the_same_value_is_seen(mirrored: Warehouse, where) -> None:
    counts = TableSpec(
        name="group_counts",
        schema=pa.schema(
            [
                pa.field("id", pa.string(), nullable=False),
                pa.field("members", pa.int64()),
                pa.field("users", pa.int64()),
            ]
        ),
        key=("id",),
        kind="snapshot",
        description="Two columns that move together.",
    )
    load_once(
        mirrored, "counts", [(counts, [{"id": "g1", "members": 2, "users": 2}])], complete_snapshots={"group_counts"}
    )
    load_once(
        mirrored, "counts", [(counts, [{"id": "g1", "members": 3, "users": 3}])], complete_snapshots={"group_counts"}
    )
    assert_mirror_equals(mirrored.path, where)


class OpeningCounter(IcebergMirror):
    """Counts the Iceberg tables a mirror run opens."""

    opened: list[str]

    def _table_for(self, conn, identifier, select, recreate=""):  # type: ignore[no-untyped-def]
        self.opened.append(identifier[1])
        return super()._table_for(conn, identifier, select, recreate)


def version(day: int) -> dict[str, object]:
    return {"owner_id": "o1", "user_id": "u1", "lesson_id": "l1", "last_date": datetime(2026, 1, day, tzinfo=UTC)}


def mirrored_sync_state(tmp_path: Path, where: IcebergLocation) -> tuple[Warehouse, Table]:
    """A warehouse whose mirror, as an earlier version did, keeps the sync state as an Iceberg table (returned)."""
    earlier = make_warehouse(tmp_path, table_mirror=IcebergMirror(where, unmirrored=()))
    earlier.ensure_tables([*ALL_SPECS, VERSIONS])
    load_once(earlier, "answers", [(ANSWERS, [answer("al1", "q1")]), (VERSIONS, [version(1)])])
    return earlier, open_catalog(where).load_table(("lms", VERSIONS.name))


def test_the_sync_state_is_not_mirrored_and_an_earlier_mirror_of_it_is_dropped(tmp_path: Path, where) -> None:
    earlier, kept = mirrored_sync_state(tmp_path, where)
    kept_files = Path(kept.metadata_location.removeprefix("file://")).parent.parent
    assert [p for p in kept_files.rglob("*") if p.is_file()]

    wh = make_warehouse(tmp_path, table_mirror=IcebergMirror(where), clock=earlier.clock)
    mirror_run(wh)
    assert not open_catalog(where).table_exists(("lms", VERSIONS.name))
    assert not [p for p in kept_files.rglob("*") if p.is_file()], "the dropped table's files were left behind"
    with duckdb.connect(str(wh.path), read_only=True) as conn:
        recorded = conn.execute("SELECT table_name FROM lms._iceberg_mirrored").fetchall()
    assert (VERSIONS.name,) not in recorded and ("answers",) in recorded
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1", minutes=5)]), (VERSIONS, [version(2)])])
    assert not open_catalog(where).table_exists(("lms", VERSIONS.name))
    assert assert_mirror_equals(wh.path, where)["answers"] == 1


def test_an_earlier_mirror_of_the_sync_state_with_its_metadata_lost_is_dropped_without_failing_the_run(
    tmp_path: Path, where
) -> None:
    earlier, kept = mirrored_sync_state(tmp_path, where)
    Path(kept.metadata_location.removeprefix("file://")).unlink()

    wh = make_warehouse(tmp_path, table_mirror=IcebergMirror(where), clock=earlier.clock)
    mirror_run(wh)  # fails the test on any table's error
    assert not open_catalog(where).table_exists(("lms", VERSIONS.name))
    assert assert_mirror_equals(wh.path, where)["answers"] == 1


def test_a_load_that_changed_nothing_opens_no_iceberg_table(tmp_path: Path, where) -> None:
    counter = OpeningCounter(where)
    counter.opened = []
    wh = make_warehouse(tmp_path, table_mirror=counter)
    wh.ensure_tables(ALL_SPECS)
    snapshots = {"complete_snapshots": {"groups"}}
    load_once(wh, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert "groups" in counter.opened
    counter.opened.clear()
    load_once(wh, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert counter.opened == [], "a mirror run after a load that changed nothing opened Iceberg tables"
    restarted = OpeningCounter(where)  # a new process: the record lives in the warehouse
    restarted.opened = []
    again = make_warehouse(tmp_path, table_mirror=restarted, clock=wh.clock)
    load_once(again, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert restarted.opened == []
    load_once(again, "groups", [(GROUPS, [group("g1", "renamed"), group("g2")])], **snapshots)
    assert restarted.opened == ["groups"]
    assert assert_mirror_equals(again.path, where)["groups"] == 2


def current_files(where: IcebergLocation, identifier: tuple[str, str]) -> list[Path]:
    return [
        Path(t.file.file_path.removeprefix("file://"))
        for t in open_catalog(where).load_table(identifier).scan().plan_files()
    ]


def test_a_data_file_lost_from_a_table_no_load_changed_is_rewritten_by_the_next_run(tmp_path: Path, where) -> None:
    """The record vouches for a table only while the data files it recorded are there with their sizes (a stat
    each): a run after loads that changed nothing opens and rewrites a table that lost one, and only that table."""
    wh = make_warehouse(tmp_path, table_mirror=IcebergMirror(where))
    wh.ensure_tables(ALL_SPECS)
    snapshots = {"complete_snapshots": {"groups"}}
    load_once(wh, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1")])])
    (lost,) = current_files(where, ("lms", "groups"))
    lost.unlink()

    counter = OpeningCounter(where)  # a new process: the record lives in the warehouse
    counter.opened = []
    again = make_warehouse(tmp_path, table_mirror=counter, clock=wh.clock)
    load_once(again, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert counter.opened == ["groups"]
    assert assert_mirror_equals(again.path, where)["groups"] == 2
    counter.opened.clear()
    load_once(again, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert counter.opened == [], "the rewritten table's files were not recorded"

    (truncated,) = current_files(where, ("lms", "answers"))
    truncated.write_bytes(truncated.read_bytes()[:-1])
    load_once(again, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert counter.opened == ["answers"]
    assert_mirror_equals(again.path, where)


def test_after_maintenance_a_run_with_nothing_changed_opens_no_iceberg_table(tmp_path: Path, where) -> None:
    """Compaction and expiry move each table's metadata on: maintenance records the files anew, so the next run
    still vouches for every table without opening one."""
    wh = make_warehouse(tmp_path, table_mirror=IcebergMirror(where))
    wh.ensure_tables(ALL_SPECS)
    snapshots = {"complete_snapshots": {"groups"}}
    for i in range(3):  # one group added a load: each load appends a file
        load_once(wh, "groups", [(GROUPS, [group(f"g{j}") for j in range(10 + i)])], **snapshots)
    assert wh.table_mirror is not None
    with wh.connect() as conn:
        report = maintain(wh.table_mirror, conn, timedelta(0))
    assert report.expired["lms.groups"] > 0 and not report.failed

    counter = OpeningCounter(where)  # a new process: the record lives in the warehouse
    counter.opened = []
    again = make_warehouse(tmp_path, table_mirror=counter, clock=wh.clock)
    load_once(again, "groups", [(GROUPS, [group(f"g{j}") for j in range(12)])], **snapshots)
    assert counter.opened == []
    assert assert_mirror_equals(again.path, where)["groups"] == 12


def test_a_record_lost_after_the_iceberg_commit_costs_a_check_not_a_write(mirrored: Warehouse, where) -> None:
    snapshots = {"complete_snapshots": {"groups"}}
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    before = snapshot_id(where, "groups")
    with mirrored.connect() as conn:  # as if the process died between the Iceberg commit and its record
        conn.execute("DELETE FROM lms._iceberg_mirrored")
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    assert snapshot_id(where, "groups") == before
    with mirrored.connect() as conn:
        recorded = conn.execute("SELECT table_name, row_count FROM lms._iceberg_mirrored").fetchall()
    assert ("groups", 2) in recorded
    assert_mirror_equals(mirrored.path, where)


def data_file_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables whose data files (and so digests) the mirror reads from now on, in order."""
    from pipeline.warehouse.lake import iceberg

    reads: list[str] = []
    data_files = iceberg._data_files

    def counted(conn, ice, where):  # type: ignore[no-untyped-def]
        reads.append(ice.name()[-1])
        return data_files(conn, ice, where)

    monkeypatch.setattr(iceberg, "_data_files", counted)
    return reads


def test_rows_first_loaded_since_the_snapshot_are_appended_without_reading_its_files(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_once(mirrored, "answers", [(ANSWERS, [answer("al1", "q1")])])
    reads = data_file_reads(monkeypatch)
    load_once(mirrored, "answers", [(ANSWERS, [answer("al2", "q1"), answer("al3", "q1")])])
    assert reads == [], "new rows alone made the mirror read the table's digests"
    assert assert_mirror_equals(mirrored.path, where)["answers"] == 3
    load_once(mirrored, "answers", [(ANSWERS, [answer("al1", "q1", valid=False, minutes=5)])])
    assert "answers" in reads  # a touched older row is compared with the table's digests
    assert assert_mirror_equals(mirrored.path, where)["answers"] == 3


def test_older_rows_only_seen_again_are_not_compared_while_no_load_updated_a_row(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older rows read again unchanged (a look-back window) are not written, so no candidates: the new rows are
    appended without the table's digests. One updated row brings the comparison back."""
    load_once(mirrored, "answers", [(ANSWERS, [answer("al1", "q1"), answer("al2", "q1")])])
    reads = data_file_reads(monkeypatch)
    seen_again = [answer("al1", "q1"), answer("al2", "q1")]
    load_once(mirrored, "answers", [(ANSWERS, [*seen_again, answer("al3", "q1")])])
    assert reads == [], "older rows seen again unchanged made the mirror read the table's digests"
    assert assert_mirror_equals(mirrored.path, where)["answers"] == 3
    load_once(mirrored, "answers", [(ANSWERS, [answer("al2", "q1", minutes=5), answer("al4", "q1")])])
    assert reads == ["answers"], "an updated older row was not compared with the table's digests"
    assert assert_mirror_equals(mirrored.path, where)["answers"] == 4


def test_each_iceberg_field_carries_its_warehouse_columns_description(tmp_path: Path, where) -> None:
    """Other engines read a column's description as its Iceberg field's doc; a table mirrored before its
    description changed gets the new one at its next sync."""
    wh = make_warehouse(tmp_path)
    wh.ensure_tables(ALL_SPECS)
    load_only(wh, "groups", [(GROUPS, [group("g1"), group("g2", disabled=True)])], complete_snapshots={"groups"})
    mirror = IcebergMirror(where)
    with wh.connect() as conn:
        mirror.sync_raw(conn, ["groups"])
        described = dict(
            conn.execute(
                "SELECT column_name, comment FROM duckdb_columns() WHERE schema_name = 'lms' "
                "AND table_name = 'groups' AND column_name <> 'last_loaded_at'"
            ).fetchall()
        )

    def docs() -> dict[str, str | None]:
        return {f.name: f.doc for f in open_catalog(where).load_table(("lms", "groups")).schema().fields}

    assert {name: doc for name, doc in docs().items() if name in described} == described
    assert all(docs().values()), docs()
    with open_catalog(where).load_table(("lms", "groups")).update_schema() as update:
        update.update_column("disabled", doc="an older description")
    with wh.connect() as conn:
        mirror.sync_raw(conn, ["groups"])
    assert docs()["disabled"] == described["disabled"]


def test_a_mart_that_did_not_change_opens_no_iceberg_table(tmp_path: Path, where) -> None:
    """The marts' mirror trusts its record like the raw tables' does: only a mart whose rows, columns or
    descriptions changed since (or that the catalog no longer registers here) is opened and written."""
    wh = make_warehouse(tmp_path)
    wh.ensure_tables(ALL_SPECS)
    with wh.connect() as conn:
        conn.execute("CREATE SCHEMA analytics")
        conn.execute("CREATE TABLE analytics.funnel AS SELECT 'l1' AS lesson_id, 3 AS learners")
        conn.execute("CREATE TABLE analytics.activity AS SELECT DATE '2026-11-01' AS day, 7 AS answers")
    marts = {"funnel": "analytics.funnel", "activity": "analytics.activity"}

    def mirror_marts() -> list[str]:
        counter = OpeningCounter(where)  # a new process each time: the record lives in the warehouse
        counter.opened = []
        with wh.connect() as conn:
            stats = counter.sync_marts(conn, marts)
        assert not [s.error for s in stats if s.error] and len(stats) == 2
        return counter.opened

    assert sorted(mirror_marts()) == ["activity", "funnel"]
    assert mirror_marts() == []
    with wh.connect() as conn:
        conn.execute("UPDATE analytics.funnel SET learners = 4")
    assert mirror_marts() == ["funnel"]
    with wh.connect() as conn:
        conn.execute("COMMENT ON COLUMN analytics.activity.answers IS 'answers given that day'")
    assert mirror_marts() == ["activity"]
    fields = {f.name: f.doc for f in open_catalog(where).load_table(("analytics", "activity")).schema().fields}
    assert fields["answers"] == "answers given that day"
    assert open_catalog(where).load_table(("analytics", "funnel")).scan().to_arrow().column("learners").to_pylist() == [
        4
    ]
    open_catalog(where).drop_table(("analytics", "funnel"))  # the catalog's entry gone: the record cannot vouch
    assert mirror_marts() == ["funnel"]
    assert mirror_marts() == []
    (lost,) = current_files(where, ("analytics", "activity"))  # nor for a mart that lost a data file
    lost.unlink()
    assert mirror_marts() == ["activity"]
    assert mirror_marts() == []
    assert open_catalog(where).load_table(("analytics", "activity")).scan().to_arrow().num_rows == 1


def test_a_lake_under_a_path_with_reserved_characters_is_mirrored_where_it_lies(tmp_path: Path) -> None:
    """pyiceberg reads a file: location's path as written: a `+` or a space in the data directory must name the same
    directory for it and for the mirror's own file handling (rows changed later are found in those files)."""
    home = tmp_path / "data+dir with space"
    home.mkdir()
    where = IcebergLocation.for_lake(home / "lake", f"sqlite:///{home / 'catalog.sqlite3'}")
    wh = make_warehouse(home, table_mirror=IcebergMirror(where))
    wh.ensure_tables(ALL_SPECS)
    snapshots = {"complete_snapshots": {"groups"}}
    load_once(wh, "groups", [(GROUPS, [group("g1"), group("g2")])], **snapshots)
    load_once(wh, "groups", [(GROUPS, [group("g1", title="renamed"), group("g2")])], **snapshots)
    assert assert_mirror_equals(wh.path, where)["groups"] == 2
    files = list((home / "lake" / "iceberg" / "lms" / "groups" / "data").glob("*.parquet"))
    assert files, "the data files lie under the data directory as it is named"
    assert not list(tmp_path.glob("data%2B*")), "no directory named by the percent-encoded path"


def test_the_background_mirror_asks_after_the_tables_a_commit_changed_only(
    mirrored: Warehouse, where, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background mirror asks after each commit's tables: telling whether they are current counts their rows
    and no other table's (at scale, counting every table after every commit was most of a no-change run's mirror)."""
    import pipeline.warehouse.lake.iceberg as iceberg

    session = {"id": "s1", "title": "S", "presenters": ["p"], "start_date": None}
    load_once(mirrored, "groups", [(GROUPS, [group("g1")])])
    load_once(mirrored, "lesson_sessions", [(SESSIONS, [session])])
    load_only(mirrored, "lesson_sessions", [(SESSIONS, [{**session, "title": "renamed"}])])
    before = snapshot_id(where, "lesson_sessions")
    counted: list[str] = []
    counting = iceberg._count
    monkeypatch.setattr(
        iceberg, "_count", lambda conn, relation, *a: counted.append(relation) or counting(conn, relation, *a)
    )
    assert mirrored.table_mirror is not None
    with mirrored.connect() as conn:
        assert mirrored.table_mirror.sync_tables_behind(conn, ["groups"]) == []  # current: nothing opened
        assert counted == ['lms."groups"']
        assert snapshot_id(where, "lesson_sessions") == before  # behind, and not asked after
        written = mirrored.table_mirror.sync_tables_behind(conn, ["lesson_sessions"])
    assert [(s.table, s.error, s.wrote) for s in written] == [("lms.lesson_sessions", "", True)]
    assert_mirror_equals(mirrored.path, where)


def test_a_mart_emptied_keeps_a_snapshot_of_no_rows_and_its_rows_come_back_in_one(tmp_path: Path, where) -> None:
    """A rewrite is one snapshot: every file it held out and the new ones in; emptied, the snapshot holds no file
    and still records what it mirrors (its content digest)."""
    wh = make_warehouse(tmp_path)
    wh.ensure_tables(ALL_SPECS)
    with wh.connect() as conn:
        conn.execute("CREATE SCHEMA analytics")
        conn.execute("CREATE TABLE analytics.funnel AS SELECT 'l' || i AS lesson_id, i AS learners FROM range(5) t(i)")
    marts = {"funnel": "analytics.funnel"}

    def mirrored() -> tuple[list[int], str | None, int]:
        with wh.connect() as conn:
            assert not [s.error for s in IcebergMirror(where).sync_marts(conn, marts) if s.error]
        table = open_catalog(where).load_table(("analytics", "funnel"))
        snapshot = table.current_snapshot()
        assert snapshot is not None and snapshot.summary is not None
        learners = sorted(table.scan().to_arrow().column("learners").to_pylist())
        return learners, snapshot.summary.get(CONTENT_DIGEST), len(table.snapshots())

    learners, first, snapshots = mirrored()
    assert (learners, snapshots) == ([0, 1, 2, 3, 4], 1) and first not in (None, EMPTY_DIGEST)
    with wh.connect() as conn:
        conn.execute("DELETE FROM analytics.funnel")
    assert mirrored() == ([], EMPTY_DIGEST, 2)
    with wh.connect() as conn:
        conn.execute("INSERT INTO analytics.funnel VALUES ('l9', 9)")
    learners, digest, snapshots = mirrored()
    assert (learners, snapshots) == ([9], 3) and digest not in (None, EMPTY_DIGEST, first)
