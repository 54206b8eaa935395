"""The deployment setup against real servers: the Dagster instance on PostgreSQL and the lake in an
S3-compatible bucket, together. A full and an incremental sync equal the platform; the runs are in
Postgres; the parts and manifests are in the bucket (nothing under the local data dir); a rebuild from
the bucket alone equals the warehouse."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import s3fs
from dagster import DagsterRunStatus, RunsFilter
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage
from lake_parts import named_parts, stored_parts
from stack_helpers import RAW, assert_warehouse_equals_platform
from warehouse.warehouse_helpers import digest_all  # tests/warehouse, a namespace package beside this one

from pipeline.warehouse.lake.lake import list_manifests
from pipeline.warehouse.lake.lakestore import ObjectLake


@pytest.mark.slow
def test_full_and_incremental_sync_with_postgres_instance_and_s3_lake_equal_the_platform(remote_stack, tmp_path):
    stack, instance = remote_stack
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
    config = (tmp_path / "dagster_home" / "dagster.yaml").read_text()
    assert "LESSONSYNC_DAGSTER_POSTGRES_URL" in config and "postgresql://" not in config  # the URL stays in env

    full = stack.sync(select=RAW, instance=instance)
    assert full.success, full.error
    assert_warehouse_equals_platform(stack)
    stack.advance(hours=24)
    incremental = stack.sync(select=RAW, instance=instance)
    assert incremental.success, incremental.error
    assert_warehouse_equals_platform(stack)
    assert incremental.materializations["lms/active_lessons"]["window"].startswith("incremental")
    quiet = stack.sync(select=RAW, instance=instance)  # its snapshots repeat: they name the parts they repeat
    assert quiet.success, quiet.error
    assert_warehouse_equals_platform(stack)
    assert quiet.materializations["lms/users"]["unchanged_since_load"] is not None

    runs = instance.get_runs(RunsFilter(run_ids=[full.run_id, incremental.run_id, quiet.run_id]))
    assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS} and len(runs) == 3
    assert not (stack.data_dir / "lake").exists()  # every part and manifest went to the bucket
    lake = ObjectLake(stack.env["LESSONSYNC_LAKE_URL"])
    manifests = list_manifests(lake)
    assert len(manifests) >= 8
    _assert_every_named_part_is_stored(lake, manifests)
    assert not stored_parts(lake) - named_parts(lake), "a repeat left the parts it no longer names"
    quiet_users = next(
        table["parts"]
        for _, ref in reversed(manifests)
        for table in json.loads(lake.read_manifest(ref.name))["tables"]
        if table["name"] == "users"
    )
    assert quiet_users and not [part for part in quiet_users if quiet.run_id in part["path"]]
    metadata = str([full.materializations, incremental.materializations])
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in metadata and "postgresql://" not in metadata

    rebuilt = tmp_path / "rebuilt.duckdb"
    rebuild = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "rebuild", "--into", str(rebuilt)],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
    assert f"from {len(manifests)} committed loads" in rebuild.stdout
    # Every table fed by the lake (certificates too: they load through the lake like every stream) is identical,
    # load metadata included; then the rebuilt file is compared with the platform.
    from_lake = {
        name: digest for name, digest in digest_all(stack.warehouse_path).items() if name in _lake_tables(lake)
    }
    assert {name: digest_all(rebuilt)[name] for name in from_lake} == from_lake
    assert {"active_lessons", "answers", "answer_results", "users", "_sync_state", "_load_runs"} <= from_lake.keys()
    stack.data_dir = tmp_path / "rebuilt-view"
    stack.data_dir.mkdir()
    (stack.data_dir / "warehouse.duckdb").symlink_to(rebuilt)
    assert_warehouse_equals_platform(stack)


def _lake_tables(lake: ObjectLake) -> set[str]:
    """The tables the lake's manifests write, and the load bookkeeping every commit keeps."""
    written = {
        table["name"] for _, ref in list_manifests(lake) for table in json.loads(lake.read_manifest(ref.name))["tables"]
    }
    return written | {"_sync_state", "_load_runs"}


def _assert_every_named_part_is_stored(lake: ObjectLake, manifests) -> None:
    stored = {
        path: info["size"]
        for path, info in s3fs.S3FileSystem(skip_instance_cache=True).find(lake.location, detail=True).items()
    }
    for _, ref in manifests:
        for table in json.loads(lake.read_manifest(ref.name))["tables"]:
            for part in table["parts"]:
                key = lake.readable(part["path"]).removeprefix("s3://")
                assert stored.get(key) == part["bytes"], f"{ref.name} names {key}, not stored whole"
