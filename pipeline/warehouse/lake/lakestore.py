"""Where the lake's bytes live: a local directory (the default) or an S3-compatible bucket. The rest of the
warehouse speaks only to a `LakeStore`, so the lake's rules (parts stored before the manifest naming them,
manifests written once) are written once, in lake.py, and hold on both.

Local: parts and manifests are files made visible by fsync + rename (or hard link, for the manifest:
create-if-absent), exactly as before. Object storage (`s3://bucket/prefix`, through fsspec's s3fs): a part
is written to a local spool file by pyarrow and uploaded whole (an S3 object is visible only once its
upload completed), and a manifest is a conditional put (`If-None-Match: *`), refused if the key exists.
DuckDB reads remote parts through the same s3fs filesystem, registered on the connection (no DuckDB
extension to download). Endpoint, region and credentials come from the usual AWS variables (AWS_ENDPOINT_URL,
AWS_REGION / AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE);
they never appear in a message: errors name the lake by its URL and scrub the secret values."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from pipeline.warehouse.duck.connection import database_file
from pipeline.warehouse.errors import LakeError

T = TypeVar("T")
MANIFESTS = "_loads"
_SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
# The filesystem each database reads s3:// paths through, by database file: DuckDB takes one per protocol for the
# whole database (every connection to the file in this process shares it), and answers its look-ups at a file
# (size, time, existence) from that filesystem's listings when it holds one.
_ATTACHED: dict[str, Any] = {}
_attached_lock = threading.Lock()
# botocore's loader of its own data files (the endpoints, the S3 model and its rules), shared by every S3 session
# of the process: a session of its own parses that JSON again, ~70 ms of CPU for every filesystem made.
_botocore_data: Any = None
_botocore_data_lock = threading.Lock()


def new_s3_filesystem(holding: str, **kwargs: Any) -> Any:
    """An s3fs filesystem of its own (no shared instance: it reads the AWS variables as it connects) on a fresh
    botocore session that reads botocore's data files through one loader for the process. `holding`: what lives
    there, for the error when s3fs is missing; `kwargs`: s3fs's."""
    try:
        import s3fs  # only deployments with an s3:// lake need it (extra "s3")
        from aiobotocore.session import AioSession
        from botocore.loaders import create_loader
    except ImportError:
        raise LakeError(
            f"{holding} is on object storage but s3fs is not installed: pip install 'lessonsync[s3]'."
        ) from None
    global _botocore_data
    session = AioSession()
    with _botocore_data_lock:
        if _botocore_data is None:
            _botocore_data = create_loader(session.get_config_variable("data_path"))
    session.register_component("data_loader", _botocore_data)
    return s3fs.S3FileSystem(session=session, skip_instance_cache=True, **kwargs)


class LakeStore(ABC):
    """The operations the lake needs from storage; paths are '/'-separated and relative to the lake root."""

    location: str  # for messages: a directory or an s3:// URL, never a credential

    @abstractmethod
    def manifest_names(self) -> list[str]:
        """File names under _loads/ (temp files included; lake.py filters them)."""

    @abstractmethod
    def read_manifest(self, name: str) -> bytes: ...

    @abstractmethod
    def create_manifest(self, name: str, data: bytes) -> Path | str:
        """Store `data` under _loads/`name` durably, only if nothing is there yet (LakeError otherwise)."""

    @abstractmethod
    def remove_manifest(self, name: str) -> None: ...

    @abstractmethod
    def manifest_location(self, name: str) -> Path | str: ...

    @abstractmethod
    def spool_path(self, directory: str, name: str) -> Path:
        """A local file where pyarrow writes a part before publish_part makes it visible."""

    @abstractmethod
    def publish_part(self, spooled: Path, directory: str, name: str) -> int:
        """Make the spooled part visible at `directory`/`name`, durably; returns its size in bytes."""

    @abstractmethod
    def sync_directory(self, directory: str) -> None:
        """After the last part of a directory: make the parts' names durable."""

    @abstractmethod
    def remove_directory(self, directory: str) -> None:
        """Forget the parts under `directory` (an abandoned load), quietly if there are none."""

    @abstractmethod
    def part_size(self, path: str) -> int | None:
        """Size of a stored part, None if it is missing."""

    @abstractmethod
    def readable(self, path: str) -> str:
        """What DuckDB's read_parquet takes for this part (after attach())."""

    def attach(self, conn: duckdb.DuckDBPyConnection) -> None:  # noqa: B027 - a no-op default, overridden where needed
        """Let `conn` read this lake's parts (nothing to do for local files)."""


class LocalLake(LakeStore):
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def __repr__(self) -> str:
        return f"LocalLake({self.location!r})"

    def manifest_names(self) -> list[str]:
        directory = self.root / MANIFESTS
        return [path.name for path in directory.iterdir()] if directory.is_dir() else []

    def read_manifest(self, name: str) -> bytes:
        return (self.root / MANIFESTS / name).read_bytes()

    def create_manifest(self, name: str, data: bytes) -> Path:
        final = self.root / MANIFESTS / name
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, final)  # atomic create-if-absent: an existing manifest is never replaced
        except FileExistsError:
            raise LakeError(
                f"manifest {final} already exists: another writer committed load {name} first. "
                "Only one process may write the warehouse at a time."
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(final.parent)
        return final

    def remove_manifest(self, name: str) -> None:
        (self.root / MANIFESTS / name).unlink(missing_ok=True)

    def manifest_location(self, name: str) -> Path:
        return self.root / MANIFESTS / name

    def spool_path(self, directory: str, name: str) -> Path:
        folder = self.root / directory
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f".{name}.tmp"

    def publish_part(self, spooled: Path, directory: str, name: str) -> int:
        with open(spooled, "rb") as handle:
            os.fsync(handle.fileno())
        final = self.root / directory / name
        os.replace(spooled, final)
        return final.stat().st_size

    def sync_directory(self, directory: str) -> None:
        fsync_dir(self.root / directory)

    def remove_directory(self, directory: str) -> None:
        shutil.rmtree(self.root / directory, ignore_errors=True)

    def part_size(self, path: str) -> int | None:
        full = self.root / path
        return full.stat().st_size if full.exists() else None

    def readable(self, path: str) -> str:
        return str(self.root / path)


SPOOL_PREFIX = "lessonsync-part-"
_swept = threading.Event()


def _sweep_dead_spools_once() -> None:
    if _swept.is_set():
        return
    _swept.set()
    for spool in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*.parquet"):
        if not _spooled_by_a_running_process(spool.name):
            spool.unlink(missing_ok=True)


def _spooled_by_a_running_process(name: str) -> bool:
    """`lessonsync-part-<pid>-<random>.parquet`: a name without a pid (or a pid whose process runs, or one this
    user may not signal) is kept; only a spool whose writer is certainly gone is removed."""
    pid = name.removeprefix(SPOOL_PREFIX).split("-", 1)[0]
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class ObjectLake(LakeStore):
    """A lake under `s3://bucket/prefix` on any S3-compatible store."""

    def __init__(self, url: str, filesystem: Any | None = None) -> None:
        self.location = url.rstrip("/")
        self._root = self.location.removeprefix("s3://")
        if not self._root or self._root.startswith("/"):
            raise LakeError(f"lake URL {url!r} names no bucket: use s3://bucket or s3://bucket/prefix.")
        self.bucket = self._root.split("/", 1)[0]
        self._fs = filesystem

    def __repr__(self) -> str:
        return f"ObjectLake({self.location!r})"

    @property
    def fs(self) -> Any:
        if self._fs is None:
            # Listings are cached for parts (immutable: DuckDB's several look-ups per file are then answered without
            # a request), never trusted for manifests (another process may have committed since): those are listed
            # afresh.
            self._fs = new_s3_filesystem(f"the lake {self.location}")
        return self._fs

    def manifest_names(self) -> list[str]:
        def names() -> list[str]:
            try:
                listed = self.fs.ls(f"{self._root}/{MANIFESTS}", detail=False, refresh=True)
            except FileNotFoundError:
                if not self.fs.exists(self.bucket):
                    raise LakeError(
                        f"the lake {self.location}: bucket {self.bucket!r} does not exist (or these "
                        "credentials may not see it). Create it, or fix LESSONSYNC_LAKE_URL."
                    ) from None
                return []
            return [path.rsplit("/", 1)[-1] for path in listed]

        return self._call("list the manifests of", names)

    def read_manifest(self, name: str) -> bytes:
        return self._call(f"read manifest {name} of", lambda: bytes(self.fs.cat_file(self._key(f"{MANIFESTS}/{name}"))))

    def create_manifest(self, name: str, data: bytes) -> str:
        key = self._key(f"{MANIFESTS}/{name}")

        def put_if_absent() -> None:
            try:
                self.fs.pipe_file(key, data, mode="create")  # If-None-Match: * (412 if the key exists)
            except FileExistsError:
                raise LakeError(
                    f"manifest s3://{key} already exists: another writer committed load {name} "
                    "first. Only one process may write the warehouse at a time."
                ) from None

        self._call(f"write manifest {name} to", put_if_absent)
        return f"s3://{key}"

    def remove_manifest(self, name: str) -> None:
        key = self._key(f"{MANIFESTS}/{name}")
        self._call(f"remove manifest {name} from", lambda: self.fs.rm_file(key))

    def manifest_location(self, name: str) -> str:
        return f"s3://{self._key(f'{MANIFESTS}/{name}')}"

    def spool_path(self, directory: str, name: str) -> Path:
        """A temp file of its own (TMPDIR), removed once uploaded or abandoned. A killed process cannot remove
        its own, so the first spool of a process removes those of processes no longer running."""
        _sweep_dead_spools_once()
        handle, path = tempfile.mkstemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", suffix=".parquet")
        os.close(handle)
        return Path(path)

    def publish_part(self, spooled: Path, directory: str, name: str) -> int:
        size = spooled.stat().st_size
        key = self._key(f"{directory}/{name}")
        try:
            self._call(f"upload {directory}/{name} to", lambda: self.fs.put_file(str(spooled), key))
        finally:
            spooled.unlink(missing_ok=True)
        return size

    def sync_directory(self, directory: str) -> None:
        pass  # an object is durable once its PUT (or multipart completion) has answered

    def remove_directory(self, directory: str) -> None:
        key = self._key(directory)
        # best effort (also none there): an abandoned load's parts have no manifest, so nothing ever reads them
        with suppress(Exception):
            self.fs.rm(key, recursive=True)

    def part_size(self, path: str) -> int | None:
        def size() -> int | None:
            key = self._key(path)
            folder = key.rsplit("/", 1)[0]
            try:  # one LIST per load folder; it also answers the look-ups DuckDB makes before reading
                listed = {entry["name"]: entry for entry in self.fs.ls(folder, detail=True)}
            except FileNotFoundError:
                return None
            if key not in listed:  # not in a listing that may predate it: ask for this object itself
                listed = {entry["name"]: entry for entry in self.fs.ls(folder, detail=True, refresh=True)}
            return int(listed[key]["size"]) if key in listed else None

        return self._call(f"check part {path} in", size)

    def readable(self, path: str) -> str:
        return f"s3://{self._key(path)}"

    def attach(self, conn: duckdb.DuckDBPyConnection) -> None:
        if "s3" not in conn.list_filesystems():  # s3fs registers under its protocol name
            conn.register_filesystem(self.fs)
            with _attached_lock:
                _ATTACHED[_database_of(conn)] = self.fs

    def _key(self, path: str) -> str:
        return f"{self._root}/{path}"

    def _call(self, what: str, operation: Callable[[], T]) -> T:
        """Run a storage call; a failure becomes a LakeError naming the lake URL and the cause, no secret."""
        try:
            return operation()
        except LakeError:
            raise
        except Exception as error:  # noqa: BLE001 - botocore, aiohttp and OSError all reach here
            # `from None`: this message, which names the lake, is what a run's error shows (not the SDK's)
            raise LakeError(
                f"could not {what} the lake {self.location}: {describe(error)}. Check that the store "
                "is reachable (AWS_ENDPOINT_URL), the bucket exists and the credentials "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE) may use it."
            ) from None


def describe(error: BaseException) -> str:
    """The error's type and message, with the values of secret AWS variables cut out."""
    text = f"{type(error).__name__}: {error}"
    for variable in _SECRET_VARIABLES:
        secret = os.environ.get(variable)
        if secret:
            text = text.replace(secret, "***")
    return text[:500]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def attached_filesystem(conn: duckdb.DuckDBPyConnection) -> Any | None:
    """The filesystem `conn` reads s3:// paths through (ObjectLake.attach), if one is attached."""
    if "s3" not in conn.list_filesystems():
        return None
    with _attached_lock:
        return _ATTACHED.get(_database_of(conn))


def _database_of(conn: duckdb.DuckDBPyConnection) -> str:
    """The database file `conn` is on; an in-memory database by the connection."""
    return database_file(conn) or f"memory:{id(conn)}"


def open_lake(location: LakeStore | Path | str) -> LakeStore:
    """A store for `location`: an s3:// URL, or a local directory."""
    if isinstance(location, LakeStore):
        return location
    if isinstance(location, str) and location.startswith("s3://"):
        return ObjectLake(location)
    if isinstance(location, str) and "://" in location:
        raise LakeError(f"lake location {location!r}: only local directories and s3://bucket/prefix are supported.")
    return LocalLake(Path(location))
