"""The Iceberg tables' FileIO: local disk and S3 through fsspec, as pyiceberg's own fsspec FileIO does it.

pyiceberg loads a FileIO class named by the catalog's `py-io-impl` property (iceberg_files.FILE_IO). Its own
`pyiceberg.io.fsspec` imports the REST catalog's auth module for a request signer, and with it `requests` and the
REST catalog: ~9 MiB of RSS and ~0.1 s of import in every process that mirrors a change, for a catalog this mirror
never uses. This one opens, sizes, tests and deletes files through the same fsspec filesystems (a local one that
makes parent directories; s3fs with the catalog's `s3.*` properties: iceberg.s3_properties), and nothing else.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Any
from urllib.parse import urlsplit

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.typedef import EMPTY_DICT, Properties

# pyiceberg's property names for S3 (pyiceberg.io), and the s3fs client argument each becomes
_S3_CLIENT_ARGUMENTS = {
    "s3.endpoint": "endpoint_url",
    "s3.access-key-id": "aws_access_key_id",
    "s3.secret-access-key": "aws_secret_access_key",
    "s3.session-token": "aws_session_token",
    "s3.region": "region_name",
}


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
            from s3fs import S3FileSystem  # the `s3` extra: only a lake on object storage needs it

            client: dict[str, Any] = {
                argument: self.properties[name]
                for name, argument in _S3_CLIENT_ARGUMENTS.items()
                if name in self.properties
            }
            return S3FileSystem(client_kwargs=client, skip_instance_cache=True)
        raise ValueError(f"the Iceberg mirror cannot reach {location!r}: its tables live on a local disk or on S3")


class _LakeFile:
    """What a file to read and a file to write share: its location on one filesystem, its size, whether it is there."""

    location: str

    def __init__(self, location: str, filesystem: AbstractFileSystem) -> None:
        super().__init__(location=location)  # type: ignore[call-arg]  # InputFile's or OutputFile's
        self._fs = filesystem

    def __len__(self) -> int:
        info = self._fs.info(self.location)
        return int(info["size"] if "size" in info else info["Size"])

    def exists(self) -> bool:
        return bool(self._fs.exists(self.location))


class LakeInputFile(_LakeFile, InputFile):
    def open(self, seekable: bool = True) -> InputStream:
        try:
            stream: InputStream = self._fs.open(self.location, "rb")
        except FileNotFoundError as error:  # the location named, as every FileIO names it
            if error.filename:
                raise
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.location) from error
        return stream


class LakeOutputFile(_LakeFile, OutputFile):
    def to_input_file(self) -> LakeInputFile:
        return LakeInputFile(self.location, self._fs)

    def create(self, overwrite: bool = False) -> OutputStream:
        if not overwrite and self.exists():
            raise FileExistsError(f"Cannot create file, file already exists: {self.location}")
        stream: OutputStream = self._fs.open(self.location, "wb")
        return stream
