"""The Iceberg tables' FileIO on an S3 bucket (moto's server): the metadata files it wrote or read are read again
from this process, not the bucket; data files always come from the bucket; a deleted file is forgotten; a metadata
file is uploaded whole, never over another unless asked, and not at all when its writing failed."""

from __future__ import annotations

import boto3
import pytest

from pipeline.warehouse.lake.iceberg import s3_properties
from pipeline.warehouse.lake.iceberg_files import FILE_IO
from pipeline.warehouse.lake.iceberg_io import METADATA_FILES, LakeFileIO, MetadataFiles


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
