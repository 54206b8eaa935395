"""A stream is one declaration (pipeline/contract/streams.py `SyncStream`): a stream registered at run time, and
nothing else, is fetched, committed and verified exactly against the simulator over HTTP, becomes a Dagster asset
of `lms_raw` in its group with its checks, and is in the generated docs and sources.yml; the runner treats it by
its kind, not its name (an incremental stream other than the active lessons keeps a cursor of its own). A
declaration that cannot work is refused with a one-line error naming the stream and what is wrong."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pytest
from dagster import AssetKey

from pipeline.contract import models as m
from pipeline.contract.streams import (
    STREAM_TABLES,
    SYNC_STREAMS,
    Link,
    Planned,
    StreamSpec,
    SyncStream,
    register,
    registered,
)
from pipeline.contract.tables import BUILDS, TABLES, record_table
from pipeline.defs.code_location import build_definitions
from pipeline.docs import render, render_sources
from pipeline.raw.runner import RawRun, RawSync
from pipeline.settings import Settings
from pipeline.stack import local_stack
from pipeline.verify import compare_warehouse, expected_rows, verified_tables
from pipeline.warehouse import Warehouse
from simulator import SimulatorConfig, SimulatorHandle, start_simulator

log = logging.getLogger("lessonsync.test")

# The groups that are not disabled: the endpoint the groups stream reads, without includeDisabled=true.
ENABLED_GROUPS = SyncStream(
    "enabled_groups",
    "snapshot",
    endpoints=(StreamSpec("enabled_groups", "/v1/groups", m.UserGroup, "enabled_groups", "records"),),
    tables=(record_table("enabled_groups", m.UserGroup, ("id",), "snapshot", "User groups that are not disabled."),),
    group="directory",
)
# The active lessons again, into a table of their own, by a cursor of their own.
PROGRESS_LOG = SyncStream(
    "progress_log",
    "incremental",
    endpoints=(
        StreamSpec("progress_log", "/v1/active-lessons", m.ActiveLesson, "progress_log", "records", incremental=True),
    ),
    tables=(
        record_table(
            "progress_log",
            m.ActiveLesson,
            ("owner_id", "user_id", "lesson_id"),
            "incremental",
            "Progress of one user on one lesson, read a second time.",
            cursor="last_date",
        ),
    ),
    group="progress",
)


class Truth:
    """The simulator's ground truth, with the records of the streams these tests declare."""

    def __init__(self, sim: SimulatorHandle) -> None:
        self.sim = sim

    def ground_truth(self, resource: str) -> Iterable[dict[str, Any]]:
        if resource == "enabled_groups":
            return [group for group in self.sim.ground_truth("groups") if not group.get("disabled")]
        if resource == "progress_log":
            return self.sim.ground_truth("active_lessons")
        return self.sim.ground_truth(resource)


def _unequal(warehouse_path: Path, truth: Truth, tables: list[str]) -> list[str]:
    with duckdb.connect(str(warehouse_path), read_only=True) as conn:
        return [diff.summary() for diff in compare_warehouse(conn, truth, tables) if not diff.equal]


@pytest.mark.slow
def test_a_snapshot_stream_declared_alone_syncs_exactly_as_an_asset_of_lms_raw(tmp_path: Path) -> None:
    with registered(ENABLED_GROUPS):
        assert STREAM_TABLES["enabled_groups"] == ("enabled_groups",) and "enabled_groups" in verified_tables()
        assert "## lms.enabled_groups" in render() and "      - name: enabled_groups\n" in render_sources()
        defs = build_definitions(Settings(data_dir=str(tmp_path)))
        spec = next(s for s in defs.resolve_all_asset_specs() if s.key == AssetKey(["lms", "enabled_groups"]))
        assert spec.group_name == "directory" and spec.description == "User groups that are not disabled."
        schema = spec.metadata["dagster/column_schema"]
        assert [c.name for c in schema.columns if not c.description] == []  # described from its listing's model
        raw = defs.resolve_assets_def(["lms", "enabled_groups"])
        assert raw.node_def.name == "lms_raw" and AssetKey(["lms", "answers"]) in raw.keys
        checks = {key.name for key in raw.check_keys if key.asset_key == spec.key}
        assert checks == {"key_unique_not_null", "not_shrinking", "contract_unchanged"}

        with local_stack(tmp_path / "data", scale="tiny") as stack:
            truth = Truth(stack.sim)
            assert 0 < len(truth.ground_truth("enabled_groups")) < len(list(stack.sim.ground_truth("groups")))
            report = stack.sync(select=["key:lms/enabled_groups", "key:lms/groups"])
            assert report.success, report.error
            assert report.failed_checks == []
            assert report.materializations["lms/enabled_groups"]["rows_inserted"] == len(
                truth.ground_truth("enabled_groups")
            )
            assert _unequal(stack.warehouse_path, truth, ["enabled_groups", "groups", "users", "group_members"]) == []
    assert "enabled_groups" not in TABLES and "enabled_groups" not in SYNC_STREAMS  # as before the block
    keys = build_definitions(Settings(data_dir=str(tmp_path))).resolve_asset_graph().get_all_asset_keys()
    assert AssetKey(["lms", "enabled_groups"]) not in keys


@pytest.fixture()
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(SimulatorConfig(seed=7, scale="tiny")) as handle:
        yield handle


def test_an_incremental_stream_is_run_by_its_kind_with_a_cursor_of_its_own(
    sim: SimulatorHandle, tmp_path: Path
) -> None:
    """Not the active lessons, not planned: read by updatedSince from its own cursor, committed exactly."""
    settings = Settings(base_url=sim.base_url, page_size=20, data_dir=str(tmp_path))
    warehouse = Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake")
    truth = Truth(sim)
    with registered(PROGRESS_LOG):
        full = list(RawSync(warehouse, settings, log, RawRun("run-1")).run(["progress_log"]))
        assert [done.stream for done in full] == ["progress_log"] and full[0].window.label == "full"
        assert _unequal(warehouse.path, truth, ["progress_log"]) == []
        cursor = warehouse.cursor("progress_log")
        assert cursor is not None and warehouse.cursor("active_lessons") is None

        sim.advance(hours=24)
        incremental = list(RawSync(warehouse, settings, log, RawRun("run-2")).run(["progress_log"]))
        assert incremental[0].window.label == "incremental" and incremental[0].window.since is not None
        assert 0 < incremental[0].stats.rows["progress_log"] < full[0].stats.rows["progress_log"]
        assert _unequal(warehouse.path, truth, ["progress_log"]) == []
        assert warehouse.cursor("progress_log") > cursor


def test_a_declaration_that_cannot_work_is_refused_naming_the_stream_and_what_is_wrong(tmp_path: Path) -> None:
    twin = SyncStream(
        "twin",
        "snapshot",
        (StreamSpec("twin", "/v1/groups", m.UserGroup, "groups", "records"),),
        (BUILDS["groups"],),
        "x",
    )
    with pytest.raises(ValueError, match=r"^stream twin: tables \['groups'\] are declared already"):
        register(twin)
    with pytest.raises(ValueError, match="^stream enabled_groups: a planned stream, and only it, names its parent"):
        SyncStream("enabled_groups", "planned", ENABLED_GROUPS.endpoints, ENABLED_GROUPS.tables, group="directory")
    with pytest.raises(ValueError, match=r"^stream enabled_groups: its endpoints fill tables \['enabled_groups'\]"):
        SyncStream("enabled_groups", "snapshot", ENABLED_GROUPS.endpoints, (BUILDS["categories"],), group="directory")
    unlinked = SyncStream(
        "enabled_groups",
        "snapshot",
        ENABLED_GROUPS.endpoints,
        ENABLED_GROUPS.tables,
        group="directory",
        links=(Link("enabled_groups", "groups", {"id": "id"}),),
    )
    with pytest.raises(
        ValueError, match=r"^stream enabled_groups: its links name tables \['groups'\], which are not its"
    ):
        register(unlinked)
    notes = SyncStream(
        "progress_notes",
        "planned",
        (
            StreamSpec(
                "progress_notes_by_user",
                "/v1/users/{user_id}/active-lessons",
                m.ActiveLesson,
                "progress_log",
                "records",
                incremental=True,
            ),
        ),
        (PROGRESS_LOG.tables[0],),
        group="progress",
        planned=Planned(parent="groups", planner="notes"),
    )
    with pytest.raises(
        ValueError, match="^stream progress_notes: it is planned from 'groups', which is not a declared"
    ):
        register(notes)
    assert {"enabled_groups", "progress_notes"}.isdisjoint(SYNC_STREAMS) and "enabled_groups" not in TABLES
    unplanned = replace(notes, planned=Planned(parent="active_lessons", planner="notes"))
    with registered(unplanned):  # a planner that does not exist fails the run before anything is fetched
        sync = RawSync(Warehouse(tmp_path / "warehouse.duckdb", tmp_path / "lake"), Settings(), log, RawRun("run-1"))
        with pytest.raises(
            ValueError, match=r"no planner named 'notes' in pipeline/raw/planners.py \(planners: answers"
        ):
            list(sync.run(["active_lessons", "progress_notes"]))
    assert not (tmp_path / "lake").exists()


def test_a_table_verify_cannot_derive_names_what_to_add() -> None:
    assert expected_rows("groups") is not None
    with registered(ENABLED_GROUPS):
        expected_rows("enabled_groups")  # one table: the records of the resource of its name
    with pytest.raises(LookupError, match=r"lms\.users_elsewhere: pipeline/verify.py has no ground truth for it"):
        expected_rows("users_elsewhere")
