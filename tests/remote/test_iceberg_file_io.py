"""The Iceberg tables' FileIO on an S3 bucket (moto's server): the metadata files it wrote or read are read again
from this process, not the bucket; data files always come from the bucket; a deleted file is forgotten; a metadata
file is uploaded whole, never over another unless asked, and not at all when its writing failed; DuckDB's
look-ups at the data files a change compares come from one listing."""

from __future__ import annotations

from types import SimpleNamespace

import boto3
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.warehouse.lake.iceberg import _listed, s3_properties
from pipeline.warehouse.lake.iceberg_files import FILE_IO
from pipeline.warehouse.lake.iceberg_io import METADATA_FILES, LakeFileIO, MetadataFiles
from pipeline.warehouse.lake.lakestore import ObjectLake


def _bucket_key(location: str) -> tuple[str, str]:
    bucket, key = location.removeprefix("s3://").split("/", 1)
    return bucket, key


def _delete_behind_its_back(location: str, env: dict[str, str]) -> None:
    """The object removed by another client, as another process or an operator would."""
    bucket, key = _bucket_key(location)
    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    client.delete_object(Bucket=bucket, Key=key)


def test_metadata_files_are_read_from_the_bucket_once_data_files_every_time(s3_env: dict[str, str]) -> None:
    root = s3_env["LESSONSYNC_LAKE_URL"] + "/iceberg/lms/t"
    written = f"{root}/metadata/00001-written.metadata.json"
    read = f"{root}/metadata/snap-1-read.avro"
    data = f"{root}/data/file.parquet"
    writer = LakeFileIO({**FILE_IO, **s3_properties()})
    with writer.new_output(written).create() as stream:
        stream.write(b'{"format-version": 2}')
        assert stream.tell() == 21
    for location in (read, data):
        with writer.new_output(location).create() as stream:
            stream.write(b"contents of " + location.encode())
    assert writer.new_input(read).open().read() == b"contents of " + read.encode()  # read once: kept from now on
    for location in (written, read, data):
        _delete_behind_its_back(location, s3_env)

    reader = LakeFileIO({**FILE_IO, **s3_properties()})  # pyiceberg makes a FileIO for every table it loads
    assert reader.new_input(written).open().read() == b'{"format-version": 2}'
    assert len(reader.new_input(written)) == 21
    assert reader.new_input(read).open().read() == b"contents of " + read.encode()
    with pytest.raises(FileNotFoundError, match="file.parquet"):
        reader.new_input(data).open()

    reader.delete(written)  # deleted through the FileIO: forgotten, and the bucket says it is gone
    with pytest.raises(FileNotFoundError, match="00001-written"):
        reader.new_input(written).open()


def test_a_metadata_file_is_uploaded_whole_never_over_another_and_never_cut_short(s3_env: dict[str, str]) -> None:
    metadata = s3_env["LESSONSYNC_LAKE_URL"] + "/iceberg/lms/t/metadata"
    first, cut = f"{metadata}/00001-first.metadata.json", f"{metadata}/00002-cut.metadata.json"
    io = LakeFileIO({**FILE_IO, **s3_properties()})
    with io.new_output(first).create() as stream:
        stream.write(b'{"first": true}')
    METADATA_FILES.forget(first)  # as another process, which never read it, would find it
    with pytest.raises(FileExistsError, match="00001-first"), io.new_output(first).create() as stream:
        stream.write(b'{"second": true}')
    with io.new_output(first).create(overwrite=True) as stream:  # replaced only when asked
        stream.write(b'{"third": true}')
    METADATA_FILES.forget(first)
    assert io.new_input(first).open().read() == b'{"third": true}'

    with pytest.raises(RuntimeError, match="cut short"), io.new_output(cut).create() as stream:
        stream.write(b'{"format-version"')
        raise RuntimeError("cut short")
    assert METADATA_FILES.get(cut) is None and not io.new_input(cut).exists()


def test_the_files_kept_stay_within_their_bound_least_recently_used_out_first() -> None:
    files = MetadataFiles(limit=10, file_limit=6)
    files.keep("a", b"aaaa")
    files.keep("b", b"bbbb")
    assert files.get("a") == b"aaaa"  # a is now the most recently used
    files.keep("c", b"cccc")  # 12 bytes: b goes
    assert (files.get("a"), files.get("b"), files.get("c")) == (b"aaaa", None, b"cccc")
    files.keep("big", b"1234567")  # above the per-file limit: not kept, nothing else goes
    assert files.get("big") is None and files.get("a") == b"aaaa"
    files.keep("a", b"a")  # kept again with new contents: counted once, and the most recently used
    files.keep("d", b"dddddd")  # 11 bytes: c goes
    assert (files.get("a"), files.get("c"), files.get("d")) == (b"a", None, b"dddddd")
    files.forget("a")
    files.keep("e", b"eee")  # 9 bytes once a is forgotten: nothing else goes
    assert (files.get("a"), files.get("d"), files.get("e")) == (None, b"dddddd", b"eee")


def test_duckdbs_look_ups_at_data_files_are_answered_from_one_listing_and_a_missing_file_is_damage(
    s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy-on-write compare reads every data file of the table (_listed): DuckDB's look-ups at each (a HEAD
    apiece, a dozen or more a file) come from one LIST of their directory instead, dropped after the block."""
    directory = s3_env["LESSONSYNC_LAKE_URL"] + "/iceberg/lms/t/data"
    lake = ObjectLake(s3_env["LESSONSYNC_LAKE_URL"])
    sizes = {}
    for number in range(3):
        name = f"{directory}/file{number}.parquet"
        with lake.fs.open(name, "wb") as sink:
            pq.write_table(pa.table({"k": list(range(number + 1))}), sink)
        sizes[name] = lake.fs.size(name)
    files = {name: SimpleNamespace(file_size_in_bytes=size) for name, size in sizes.items()}
    conn = duckdb.connect()
    lake.attach(conn)
    calls: list[str] = []
    call = lake.fs._call_s3

    async def counted(method: str, *args: object, **kwargs: object) -> object:
        calls.append(method)
        return await call(method, *args, **kwargs)

    monkeypatch.setattr(lake.fs, "_call_s3", counted)
    query = f"SELECT count(*) FROM read_parquet([{', '.join(repr(name) for name in files)}])"
    with _listed(conn, files):  # type: ignore[arg-type]  # only the recorded sizes are read
        for _ in range(2):
            assert conn.execute(query).fetchone() == (6,)
    assert calls.count("list_objects_v2") == 1 and "head_object" not in calls, calls
    calls.clear()
    assert conn.execute(query).fetchone() == (6,)  # the listing is gone: DuckDB asks the store again
    assert "head_object" in calls and "list_objects_v2" not in calls, calls

    damaged = {**files, f"{directory}/lost.parquet": SimpleNamespace(file_size_in_bytes=10)}
    with pytest.raises(FileNotFoundError, match="lost.parquet"), _listed(conn, damaged):  # type: ignore[arg-type]
        pass
    wrong = {name: SimpleNamespace(file_size_in_bytes=size + 1) for name, size in sizes.items()}
    with pytest.raises(FileNotFoundError, match="not "), _listed(conn, wrong):  # type: ignore[arg-type]
        pass


def test_every_s3_filesystem_reads_botocores_data_files_through_one_loader(
    s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each lake's filesystem has a session of its own (the AWS variables are read as it connects), and every session
    shares the loader of botocore's endpoint and S3 model JSON: a filesystem made after the first parses none of it
    again."""
    from botocore.loaders import JSONFileLoader

    bucket = s3_env["LESSONSYNC_LAKE_URL"].removeprefix("s3://").split("/", 1)[0]
    first = ObjectLake(s3_env["LESSONSYNC_LAKE_URL"])
    first.fs.ls(bucket)
    parsed: list[str] = []
    load_file = JSONFileLoader.load_file

    def counted(self: JSONFileLoader, file_path: str, *args: object, **kwargs: object) -> object:
        parsed.append(file_path)
        return load_file(self, file_path, *args, **kwargs)

    monkeypatch.setattr(JSONFileLoader, "load_file", counted)
    second = ObjectLake(s3_env["LESSONSYNC_LAKE_URL"])
    assert second.fs.ls(bucket) == first.fs.ls(bucket)  # its first request makes its client
    assert second.fs is not first.fs and second.fs.session is not first.fs.session
    assert parsed == []


def test_the_fileios_of_one_s3_configuration_share_a_filesystem_and_new_credentials_get_their_own(
    s3_env: dict[str, str],
) -> None:
    """pyiceberg makes a FileIO for every table it loads; they share one filesystem (one S3 client) as long as the
    AWS variables are the same, and the process keeps a few configurations only."""
    from pipeline.warehouse.lake import iceberg_io

    location = s3_env["LESSONSYNC_LAKE_URL"] + "/iceberg/lms/t/data/file.parquet"
    properties = {**FILE_IO, **s3_properties()}
    one = LakeFileIO(properties).new_output(location)
    with one.create(overwrite=True) as stream:
        stream.write(b"rows")
    other = LakeFileIO(properties).new_input(location)
    assert other.open().read() == b"rows"
    assert other._fs is one._fs  # type: ignore[attr-defined]
    rotated = LakeFileIO({**properties, "s3.session-token": "another"}).new_input(location)
    assert rotated._fs is not one._fs  # type: ignore[attr-defined]
    for number in range(iceberg_io._S3_FILESYSTEMS_KEPT):
        LakeFileIO({**properties, "s3.session-token": f"token {number}"}).new_input(location)
    assert len(iceberg_io._S3_FILESYSTEMS) == iceberg_io._S3_FILESYSTEMS_KEPT
    assert LakeFileIO(properties).new_input(location)._fs is not one._fs  # type: ignore[attr-defined]
