"""The Iceberg tables' FileIO: local disk and S3 through fsspec, as pyiceberg's own fsspec FileIO does it.

pyiceberg loads a FileIO class named by the catalog's `py-io-impl` property (iceberg_files.FILE_IO). Its own
`pyiceberg.io.fsspec` imports the REST catalog's auth module for a request signer, and with it `requests` and the
REST catalog: ~9 MiB of RSS and ~0.1 s of import in every process that mirrors a change, for a catalog this mirror
never uses. This one opens, sizes, tests and deletes files through the same fsspec filesystems (a local one that
makes parent directories; s3fs with the catalog's `s3.*` properties: iceberg.s3_properties), and nothing else.

On object storage every request is a round trip, and a table's commit reads its metadata files again and again
(the table's metadata JSON, the manifest list and manifests, by the scan, the overwrite, the reload after the
commit). Iceberg writes each metadata file once under a name of its own and never changes it, so this process
keeps the ones it read or wrote (MetadataFiles, bounded): each is fetched at most once, in one GET, never behind
a HEAD, and written in one PUT (exclusive where it must not replace one). Data files are never kept; local
files are read and written on the disk each time.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections import OrderedDict
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.typedef import EMPTY_DICT, Properties

from pipeline.warehouse.lake.lakestore import new_s3_filesystem

# pyiceberg's property names for S3 (pyiceberg.io), and the s3fs client argument each becomes
_S3_CLIENT_ARGUMENTS = {
    "s3.endpoint": "endpoint_url",
    "s3.access-key-id": "aws_access_key_id",
    "s3.secret-access-key": "aws_secret_access_key",
    "s3.session-token": "aws_session_token",
    "s3.region": "region_name",
}


# One filesystem per S3 configuration for the process, the last few used: pyiceberg makes a FileIO for every table
# it loads (~90 in a tiny sync), and a filesystem's first request makes an S3 client (its TLS context, its endpoint
# rules). The configuration holds the credentials, so other AWS variables make another filesystem; the FileIO never
# lists a directory, so no filesystem holds a listing another FileIO would trust.
_S3_FILESYSTEMS: OrderedDict[tuple[tuple[str, str], ...], AbstractFileSystem] = OrderedDict()
_S3_FILESYSTEMS_KEPT = 4
_s3_filesystems_lock = threading.Lock()

# Iceberg's metadata files: the table metadata JSON (gzipped or not), manifest lists and manifests (Avro)
METADATA_SUFFIXES = (".metadata.json", ".avro")
KEPT_BYTES = 16 * 1024 * 1024  # the metadata files kept in this process, at most (the least recently used go)
KEPT_FILE_BYTES = 8 * 1024 * 1024  # a larger metadata file is read, not kept


class MetadataFiles:
    """The bytes of the Iceberg metadata files on object storage this process read or wrote, by location, least
    recently used out first beyond `limit` bytes in all. A deleted file is forgotten."""

    def __init__(self, limit: int = KEPT_BYTES, file_limit: int = KEPT_FILE_BYTES) -> None:
        self.limit, self.file_limit = limit, file_limit
        self._files: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, location: str) -> bytes | None:
        with self._lock:
            content = self._files.get(location)
            if content is not None:
                self._files.move_to_end(location)
            return content

    def keep(self, location: str, content: bytes) -> None:
        if len(content) > self.file_limit:
            return
        with self._lock:
            self._bytes += len(content) - len(self._files.pop(location, b""))
            self._files[location] = content
            while self._bytes > self.limit:
                self._bytes -= len(self._files.popitem(last=False)[1])

    def forget(self, location: str) -> None:
        with self._lock:
            self._bytes -= len(self._files.pop(location, b""))


METADATA_FILES = MetadataFiles()


def kept(location: str, filesystem: AbstractFileSystem) -> bool:
    """Whether the file at `location` is one MetadataFiles keeps: Iceberg metadata, on object storage."""
    return location.endswith(METADATA_SUFFIXES) and not isinstance(filesystem, LocalFileSystem)


class LakeFileIO(FileIO):
    """Files under `file:` and `s3://` locations (a plain path is a local file)."""

    def __init__(self, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(properties=properties)
        self._filesystems: dict[str, AbstractFileSystem] = {}
        self._lock = threading.Lock()  # the mirror's threads share one FileIO per table

    def new_input(self, location: str) -> LakeInputFile:
        return LakeInputFile(location, self._filesystem(location))

    def new_output(self, location: str) -> LakeOutputFile:
        return LakeOutputFile(location, self._filesystem(location))

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        METADATA_FILES.forget(path)
        self._filesystem(path).rm(path)

    def _filesystem(self, location: str) -> AbstractFileSystem:
        scheme = urlsplit(location).scheme or "file"
        with self._lock:
            if scheme not in self._filesystems:
                self._filesystems[scheme] = self._make(scheme, location)
            return self._filesystems[scheme]

    def _make(self, scheme: str, location: str) -> AbstractFileSystem:
        if scheme == "file":
            return LocalFileSystem(auto_mkdir=True)
        if scheme in ("s3", "s3a", "s3n"):
            client: dict[str, Any] = {
                argument: self.properties[name]
                for name, argument in _S3_CLIENT_ARGUMENTS.items()
                if name in self.properties
            }
            return _s3_filesystem(client, location)
        raise ValueError(f"the Iceberg mirror cannot reach {location!r}: its tables live on a local disk or on S3")


def _s3_filesystem(client: dict[str, Any], location: str) -> AbstractFileSystem:
    """The process's filesystem for the S3 client arguments `client`, made on first use."""
    key = tuple(sorted(client.items()))
    with _s3_filesystems_lock:
        filesystem = _S3_FILESYSTEMS.get(key)
        if filesystem is None:
            filesystem = _S3_FILESYSTEMS[key] = new_s3_filesystem(
                f"the Iceberg table file {location}", client_kwargs=client
            )
            while len(_S3_FILESYSTEMS) > _S3_FILESYSTEMS_KEPT:
                _S3_FILESYSTEMS.popitem(last=False)
        _S3_FILESYSTEMS.move_to_end(key)
        return filesystem


class _LakeFile:
    """What a file to read and a file to write share: its location on one filesystem, its size, whether it is there."""

    location: str

    def __init__(self, location: str, filesystem: AbstractFileSystem) -> None:
        super().__init__(location=location)  # type: ignore[call-arg]  # InputFile's or OutputFile's
        self._fs = filesystem
        self._size: int | None = None  # known once the file is open (fsspec learns it then)

    def __len__(self) -> int:
        content = METADATA_FILES.get(self.location) if kept(self.location, self._fs) else None
        if content is not None:
            return len(content)
        if self._size is not None:
            return self._size
        info = self._fs.info(self.location)
        return int(info["size"] if "size" in info else info["Size"])

    def exists(self) -> bool:
        return bool(self._fs.exists(self.location))


class LakeInputFile(_LakeFile, InputFile):
    def open(self, seekable: bool = True) -> InputStream:
        try:
            if kept(self.location, self._fs):  # read whole by pyiceberg anyway: one GET, no HEAD for its size
                content = METADATA_FILES.get(self.location)
                if content is None:
                    content = bytes(self._fs.cat_file(self.location))
                    METADATA_FILES.keep(self.location, content)
                return io.BytesIO(content)
            stream: InputStream = self._fs.open(self.location, "rb")
        except FileNotFoundError as error:  # the location named, as every FileIO names it
            if error.filename:
                raise
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.location) from error
        self._size = getattr(stream, "size", None)
        return stream


class LakeOutputFile(_LakeFile, OutputFile):
    def to_input_file(self) -> LakeInputFile:
        return LakeInputFile(self.location, self._fs)

    def create(self, overwrite: bool = False) -> OutputStream:
        if kept(self.location, self._fs):  # small, read back soon: uploaded whole, and kept
            return _MetadataUpload(self._fs, self.location, exclusive=not overwrite)
        if not overwrite and self.exists():
            raise FileExistsError(f"Cannot create file, file already exists: {self.location}")
        stream: OutputStream = self._fs.open(self.location, "wb")
        return stream


class _MetadataUpload:
    """A metadata file written to object storage: uploaded in one PUT as it is closed, `exclusive`ly when it must
    not replace one (If-None-Match, as the lake's manifests are written: no HEAD and LIST before it, and no race),
    then kept (MetadataFiles): pyiceberg reads it back (the new table metadata after a commit, the new manifests in
    the next commit of the process). A file whose writing raised is not uploaded."""

    def __init__(self, filesystem: AbstractFileSystem, location: str, exclusive: bool) -> None:
        self._fs, self._location, self._exclusive = filesystem, location, exclusive
        self._buffer: io.BytesIO | None = io.BytesIO()

    def write(self, b: bytes) -> int:
        if self._buffer is None:
            raise ValueError(f"write to a closed file: {self._location}")
        return self._buffer.write(b)

    def tell(self) -> int:
        if self._buffer is None:
            raise ValueError(f"tell on a closed file: {self._location}")
        return self._buffer.tell()

    def close(self) -> None:
        if self._buffer is None:
            return
        content, self._buffer = self._buffer.getvalue(), None
        METADATA_FILES.forget(self._location)
        try:
            self._fs.pipe_file(self._location, content, mode="create" if self._exclusive else "overwrite")
        except FileExistsError:
            raise FileExistsError(f"Cannot create file, file already exists: {self._location}") from None
        METADATA_FILES.keep(self._location, content)

    def __enter__(self) -> _MetadataUpload:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is not None:  # a file cut short is not uploaded
            self._buffer = None
            return
        self.close()
