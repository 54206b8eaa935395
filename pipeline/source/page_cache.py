"""Decoded snapshot pages kept on disk, so a page the platform serves again byte for byte is not decoded again.

The snapshots (groups and the users of each group, the lesson catalogue, sessions, categories) are listed whole
every run, and on a quiet night almost every page is the one of the night before. Decoding them was the largest
part of the client's work in a no-change run (~1 s of the event loop at scale large, where the GIL is the
bottleneck). A page's decoding is a function of its request, its body and the decoding code, so the cache key is
a SHA-256 digest of all three (SHA-256 for the SHA extensions of today's CPUs: 2-3x BLAKE2b's speed on ~100 MB of
bodies a quiet night at scale large): the stream, the endpoint and parameters as sent, whether key hashes are wanted,
the body, and a fingerprint of the code (every module of pipeline/source and pipeline/contract, and the versions
of the libraries that decode). Any change to any of them is another key: a miss, decoded as before.

What is kept: the page's batches (Arrow IPC), its served and record counts. Not kept: pages with quarantined
records (their rows carry the time they were seen) and the key hashes of drift detection (Python's string hash
differs from process to process): those are computed again from the page's own batch, as the decoders do.
Entries are files written atomically (temp file, rename); a file that cannot be read is a miss. After a complete
run of a stream, the entries of its streams that the run did not use are removed: the cache holds one night.

Entries are written by a thread of their own, not by the caller (the client's event loop): a miss costs a file
created, written and renamed, 0.14 ms on a quiet disk but 1.5 ms a page while a commit writes the warehouse beside
it (a 1%-change run at scale large: ~1.5 s of the loop's time for its ~1,000 changed group pages, and every
snapshot page of a full sync). The page is serialized first (Arrow IPC, ~15 us), so the writer holds bytes, never
the caller's batches; at most WRITES_PENDING wait, beyond that the caller writes its own. `close` (the client's)
waits for the writes in flight: an entry not written is only a miss next time."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from importlib import metadata
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.contract.tables import TABLES
from pipeline.source.decoding import Batch, Page, PageLocation

log = logging.getLogger("lessonsync.source")
_LENGTH = struct.Struct("<Q")
_DECODING_PACKAGES = ("pyarrow", "pydantic", "pydantic-core", "msgspec", "orjson", "numpy")
STALE_AFTER_S = 2.0  # an entry used this long before a run's start was not used by that run
WRITES_PENDING = 64  # serialized pages waiting for the writer thread: ~3 MB of group pages at most


class PageCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._write_failed = False  # warned once: a read-only or full disk would otherwise warn every page
        self._warn_lock = threading.Lock()  # the writer thread and, when it is behind, the caller write
        self._writer: ThreadPoolExecutor | None = None
        self._pending = threading.BoundedSemaphore(WRITES_PENDING)

    def page(self, location: PageLocation, body: bytes, key_fields: tuple[str, ...] | None,
             decode: Callable[[bytes], Page]) -> Page:
        """The decoded page for `body` served at `location`: from the cache, else `decode(body)`, kept for the
        next run. `key_fields`: the own table's key columns when the page needs key hashes, else None."""
        name = self._name(location, body, key_fields is not None)
        cached = self._read(name, location, key_fields)
        if cached is not None:
            return cached
        page = decode(body)
        if not page.quarantined:
            self._write_later(name, _serialized(page))
        return page

    def close(self) -> None:
        """Wait for the entries being written (module docstring); the cache can be used again afterwards."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)

    def forget_unused(self, streams: tuple[str, ...], since: float) -> int:
        """Remove the entries of `streams` not used since `since` (time.time()); how many were removed."""
        removed = 0
        prefixes = tuple(f"{stream}-" for stream in streams)
        try:
            entries = list(os.scandir(self.directory))
        except OSError:  # none yet, or unusable (warned when written): the cache never fails a stream
            return 0
        for entry in entries:
            if entry.name.startswith(prefixes) and entry.name.endswith(".page"):
                try:
                    if entry.stat().st_mtime < since - STALE_AFTER_S:
                        os.unlink(entry.path)
                        removed += 1
                except OSError:  # removed meanwhile by another process's run, or not ours to remove
                    pass
        return removed

    def _name(self, location: PageLocation, body: bytes, with_keys: bool) -> str:
        digest = hashlib.sha256(code_fingerprint())
        request = [location.stream, location.endpoint, sorted(location.params.items()), with_keys]
        digest.update(json.dumps(request).encode())
        digest.update(body)
        return f"{location.stream}-{digest.hexdigest()[:40]}.page"

    def _read(self, name: str, location: PageLocation, key_fields: tuple[str, ...] | None) -> Page | None:
        path = self.directory / name
        try:
            raw = path.read_bytes()
            os.utime(path)  # used by this run: kept by forget_unused
            header_size = _LENGTH.unpack_from(raw)[0]
            header = json.loads(raw[_LENGTH.size:_LENGTH.size + header_size])
            offset, batches = _LENGTH.size + header_size, []
            for table in header["tables"]:
                size = _LENGTH.unpack_from(raw, offset)[0]
                offset += _LENGTH.size
                records = pa.ipc.read_record_batch(pa.py_buffer(raw[offset:offset + size]), TABLES[table].schema)
                offset += size
                batches.append(Batch(TABLES[table], records, location.endpoint, location.page))
        except (FileNotFoundError, NotADirectoryError):  # not cached (or no cache directory): a miss
            return None
        except (OSError, ValueError, KeyError, struct.error, pa.ArrowException) as error:
            log.warning("page cache entry %s could not be read (%s); decoding the page again", path, error)
            return None
        own = batches[0].records if header["records"] else None
        hashes = None if key_fields is None else key_hashes(own, key_fields, header["records"])
        return Page(location, header["served"], batches, header["records"], 0, hashes, own, from_cache=True)

    def _write_later(self, name: str, parts: list[bytes | pa.Buffer]) -> None:
        if not self._pending.acquire(blocking=False):  # the writer is behind: no more bytes wait for it
            self._write(name, parts)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lessonsync-page-cache")

        def write() -> None:
            try:
                self._write(name, parts)
            finally:
                self._pending.release()

        self._writer.submit(write)

    def _write(self, name: str, parts: list[bytes | pa.Buffer]) -> None:
        temp = self.directory / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with open(temp, "wb") as file:
                for part in parts:
                    file.write(part)
            os.replace(temp, self.directory / name)
        except OSError as error:  # a full or read-only disk costs the next run its decoding, nothing else
            with self._warn_lock:
                first, self._write_failed = not self._write_failed, True
            if first:
                log.warning("page cache entry %s could not be written (%s); pages are decoded as usual, and this "
                            "run writes no more warnings about it (LESSONSYNC_PAGE_CACHE=false turns the cache off)",
                            self.directory / name, error)
            with suppress(OSError):
                temp.unlink(missing_ok=True)


def _serialized(page: Page) -> list[bytes | pa.Buffer]:
    """An entry's bytes: header length, header (JSON), then each batch's length and Arrow IPC bytes."""
    header = json.dumps({"served": page.served, "records": page.records,
                         "tables": [batch.table.name for batch in page.batches]}).encode()
    parts: list[bytes | pa.Buffer] = [_LENGTH.pack(len(header)), header]
    for batch in page.batches:
        serialized = batch.records.serialize()
        parts += [_LENGTH.pack(serialized.size), serialized]
    return parts


def key_hashes(own: pa.RecordBatch | None, key_fields: tuple[str, ...], records: int) -> np.ndarray:
    """The hashes the decoders give a page's keys (a value alone for one field, else a tuple), from its batch."""
    if own is None or not records:
        return np.empty(0, dtype=np.int64)
    columns = [own.column(name).to_pylist() for name in key_fields]
    keys = columns[0] if len(columns) == 1 else zip(*columns, strict=True)
    return np.fromiter(map(hash, keys), dtype=np.int64, count=records)


_FINGERPRINT: bytes | None = None


def code_fingerprint() -> bytes:
    """What decoding depends on besides the request and the body: the modules that decode and declare the
    tables, and the versions of the libraries they call."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        digest = hashlib.blake2b(digest_size=20)
        package = Path(__file__).resolve().parent.parent
        for path in sorted([*package.joinpath("source").glob("*.py"), *package.joinpath("contract").glob("*.py")]):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        for name in _DECODING_PACKAGES:
            digest.update(f"{name}={_version(name)}".encode())
        _FINGERPRINT = digest.digest()
    return _FINGERPRINT


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def cacheable(table: str) -> bool:
    """Snapshot streams only: pulled whole every run, so their pages come back unchanged night after night. Their
    keys must be strings: an Arrow value then hashes as the decoders' value does (see key_hashes)."""
    spec = TABLES[table]
    return spec.kind == "snapshot" and all(pa.types.is_string(spec.schema.field(k).type) for k in spec.key)
