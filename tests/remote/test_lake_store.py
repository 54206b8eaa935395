"""The lake's storage rules on both stores, a local directory and an S3 bucket (moto): a manifest is
written once and never replaced, temp names are not loads, a part is checked against the size its
manifest recorded, and DuckDB reads S3 parts through the registered filesystem."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipeline.contract.tables import TableSpec
from pipeline.settings import Settings
from pipeline.warehouse import Warehouse
from pipeline.warehouse.errors import LakeError
from pipeline.warehouse.lake import lakestore
from pipeline.warehouse.lake.lake import PartWriter, check_parts, list_manifests
from pipeline.warehouse.lake.lakestore import LakeStore, LocalLake, ObjectLake, open_lake
from pipeline.warehouse.lake.manifest import PartFile


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> LakeStore:
    if request.param == "local":
        return LocalLake(tmp_path / "lake")
    return ObjectLake(request.getfixturevalue("s3_env")["LESSONSYNC_LAKE_URL"])


def test_a_manifest_is_written_once_and_never_replaced(lake: LakeStore):
    name = "0000000001-run-a.json"
    lake.create_manifest(name, b'{"first": true}')
    with pytest.raises(LakeError, match="already exists: another writer committed load"):
        lake.create_manifest(name, b'{"second": true}')
    assert lake.read_manifest(name) == b'{"first": true}'
    assert [(seq, ref.name) for seq, ref in list_manifests(lake)] == [(1, name)]


def test_parts_are_published_whole_checked_by_size_and_readable_by_duckdb(lake: LakeStore):
    schema = pa.schema([("id", pa.int64()), ("title", pa.string())])
    writer = PartWriter(lake, "t/loaded_date=2026-11-24/load-1", schema, part_rows=3, row_group_rows=2)
    for start in range(0, 7, 2):
        writer.write(pa.record_batch([pa.array(range(start, start + 2)), pa.array(["été 🎓"] * 2)], schema=schema))
    parts = writer.finish()
    assert [part.rows for part in parts] == [4, 4]  # closed every part_rows, written in whole row groups
    conn = duckdb.connect()
    files = check_parts(lake, parts, "load 1", conn)
    assert conn.execute("SELECT count(*), sum(id) FROM read_parquet($files)", {"files": files}).fetchone() == (8, 28)
    with pytest.raises(LakeError, match=r"has \d+ bytes, not 1: the lake is damaged"):
        check_parts(lake, (PartFile(parts[0].path, 4, 1),), "load 1")
    with pytest.raises(LakeError, match="is missing"):
        check_parts(lake, (PartFile("t/none.parquet", 1, 10),), "load 2")


def test_an_abandoned_writer_leaves_no_part(lake: LakeStore):
    schema = pa.schema([("id", pa.int64())])
    writer = PartWriter(lake, "t/loaded_date=2026-11-24/load-2", schema, part_rows=1, row_group_rows=1)
    writer.write(pa.record_batch([pa.array([1])], schema=schema))
    deadline = time.monotonic() + 30  # a full part is published in the background
    while not writer.parts and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lake.part_size("t/loaded_date=2026-11-24/load-2/part-000000.parquet") is not None
    writer.discard()
    assert lake.part_size("t/loaded_date=2026-11-24/load-2/part-000000.parquet") is None


def test_a_part_that_is_never_published_leaves_no_spool(lake: LakeStore, tmp_path: Path):
    """The first part's upload fails, so the parts closed after it are never published: none of their spools stays."""
    schema = pa.schema([("id", pa.int64())])
    spools: list[Path] = []
    spool_path, publish_part = lake.spool_path, lake.publish_part

    def spool(directory: str, name: str) -> Path:
        spools.append(spool_path(directory, name))
        return spools[-1]

    def publish(spooled: Path, directory: str, name: str) -> int:
        if name == "part-000000.parquet":
            spooled.unlink()
            raise LakeError(f"upload {name} failed")
        return publish_part(spooled, directory, name)

    lake.spool_path, lake.publish_part = spool, publish  # type: ignore[method-assign]
    writer = PartWriter(lake, "t/loaded_date=2026-11-24/load-3", schema, part_rows=1, row_group_rows=1)
    for value in range(3):
        writer.write(pa.record_batch([pa.array([value])], schema=schema))
    with pytest.raises(LakeError, match="upload part-000000.parquet failed"):
        writer.finish()
    writer.discard()
    assert len(spools) == 3
    assert [path for path in spools if path.exists()] == []


def test_the_first_spool_of_a_process_removes_those_of_processes_no_longer_running(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    monkeypatch.setattr(lakestore, "_swept", threading.Event())
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"lessonsync-part-{int(ended.stdout)}-abc.parquet"
    running = tmp_path / f"lessonsync-part-{os.getppid()}-abc.parquet"
    unnumbered = tmp_path / "lessonsync-part-abcdefgh.parquet"  # an older version's name: its writer is unknown
    for path in (dead, running, unnumbered):
        path.write_bytes(b"PAR1")
    spooled = ObjectLake(s3_env["LESSONSYNC_LAKE_URL"]).spool_path("t", "part-000000.parquet")
    assert spooled.parent == tmp_path and spooled.name.startswith(f"lessonsync-part-{os.getpid()}-")
    assert not dead.exists()
    assert running.exists() and unnumbered.exists()


def test_the_lake_setting_accepts_only_s3_urls(tmp_path: Path):
    assert Settings(data_dir=tmp_path).lake_location == tmp_path / "lake"
    assert Settings(lake_url="s3://bucket/prefix").lake_location == "s3://bucket/prefix"
    with pytest.raises(ValueError, match="must look like s3://bucket"):
        Settings(lake_url="gs://bucket")
    assert isinstance(open_lake("s3://bucket/prefix"), ObjectLake)
    assert isinstance(open_lake(tmp_path), LocalLake)


def test_a_first_load_reads_the_same_rows_from_either_store(lake: LakeStore, tmp_path: Path):
    """A first load of five parts from an S3 lake or a local one: every row, a duplicated key keeping its newest
    row, and no temp table left behind."""
    spec = TableSpec(
        name="notes",
        schema=pa.schema(
            [pa.field("id", pa.string(), nullable=False), pa.field("body", pa.string()), pa.field("n", pa.int64())]
        ),
        key=("id",),
        kind="incremental",
        cursor_field="n",
        description="Notes.",
    )
    wh = Warehouse(
        tmp_path / "w.duckdb", lake if isinstance(lake, LocalLake) else lake.location, part_rows=50, row_group_rows=25
    )
    ids = [f"k{(i * 37) % 200:03d}" for i in range(200)]  # every id once, in scrambled order
    with wh.one_connection() as conn:  # the commit's connection: its temp tables are visible here
        with wh.load("notes", "run-1", datetime(2026, 11, 1, tzinfo=UTC)) as load:
            load.write(
                spec,
                pa.record_batch({"id": ids, "body": [f"v{i}" for i in range(200)], "n": [0] * 200}, schema=spec.schema),
            )
            load.write(spec, pa.record_batch({"id": ["k007"], "body": ["newest"], "n": [1]}, schema=spec.schema))
            assert load.commit().tables["notes"].inserted == 200
        assert conn.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone()[0] == 0
        stored = conn.execute("SELECT id, body FROM lms.notes ORDER BY id").fetchall()
    assert [i for i, _ in stored] == sorted(ids)
    assert dict(stored)["k007"] == "newest"
