"""Decoded snapshot pages kept on disk, so a page the platform serves again byte for byte is not decoded again.

The snapshots are listed whole every run, and on a quiet night almost every page is the one of the night before.
A page's decoding is a function of its request, its body and the decoding code, so the key is a SHA-256 digest of
all three: any change to any of them is another key, a miss, decoded as before.

What is kept: the page's batches (Arrow IPC), its served and record counts. Not kept: pages with quarantined
records (their rows carry the time they were seen) and the key hashes of drift detection (Python's string hash
differs from process to process): those are computed again from the page's own batch, as the decoders do.

Where entries live (one pack per stream and run), how packs are kept or removed, and how entries are written:
docs/design.md, "The page cache".
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from pipeline.contract.tables import TABLES
from pipeline.source.decoding import Batch, Page, PageLocation

log = logging.getLogger("lessonsync.source")
_LENGTH = struct.Struct("<Q")
_ENTRY = struct.Struct("<QH")  # an entry's header: its payload's length, its name's length (then the name, the payload)
_DECODING_PACKAGES = ("pyarrow", "pydantic", "pydantic-core", "msgspec", "orjson", "numpy")
PACK = ".pack"
LEGACY_ENTRY = ".page"  # a file per page, as the cache kept them before packs: never read, removed like old packs
STALE_AFTER_S = 2.0  # a pack written to this long before a run's start was not written by that run
WRITES_PENDING = 64  # serialized pages waiting for the writer thread: ~3 MB of group pages at most

Entry = tuple[Path, int, int]  # the pack holding an entry, its payload's offset and length


class PageCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._token = uuid.uuid4().hex[:16]  # names this cache's packs: other clients' (other runs') are read
        self._write_failed = False  # warned once, and no more writes: a read-only or full disk would warn every page
        self._append_lock = threading.Lock()  # the writer thread and, when it is behind, the caller append
        self._packs: dict[str, BinaryIO] = {}  # stream -> this cache's pack, open for appending
        self._index: dict[str, dict[str, Entry]] = {}  # stream -> entry name -> where earlier runs keep it
        self._pack_entries: dict[Path, int] = {}  # entries in each pack indexed
        self._used: dict[Path, set[str]] = {}  # pack -> names of its entries read back since it was indexed
        self._readers: dict[Path, int] = {}  # pack -> a descriptor open for reading: one open a pack, not one a page
        self._writer: ThreadPoolExecutor | None = None
        self._pending = threading.BoundedSemaphore(WRITES_PENDING)

    def page(
        self, location: PageLocation, body: bytes, key_fields: tuple[str, ...] | None, decode: Callable[[bytes], Page]
    ) -> Page:
        """The decoded page for `body` served at `location`: from the cache, else `decode(body)`, kept for the
        next run. `key_fields`: the own table's key columns when the page needs key hashes, else None."""
        name = self._name(location, body, key_fields is not None)
        entry = self._entries(location.stream).get(name)
        cached = None if entry is None else self._read_back(name, entry, location, key_fields)
        if cached is not None:
            return cached
        page = decode(body)
        if not page.quarantined:
            self._write_later(location.stream, name, _serialized(page))
        return page

    def close(self) -> None:
        """Wait for the entries being written and close the packs (module docstring); the cache can be used
        again afterwards (its packs are appended to)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)
        for pack in list(self._readers):
            self._forget_reader(pack)
        with self._append_lock:
            packs, self._packs = self._packs, {}
            for handle in packs.values():
                try:
                    handle.close()
                except OSError as error:
                    self._warn_write_failed(Path(handle.name), error)

    def forget_unused(self, streams: tuple[str, ...], since: float) -> int:
        """After a complete run of `streams` that started at `since` (time.time()): keep the packs of earlier runs
        that served at least half their entries in this run, and remove the others, their entries this run read
        back copied first to this cache's packs (which hold the pages this run decoded). Packs written since the
        run started (another run's) are left alone. Returns how many packs were removed.

        A no-change run copies nothing (every pack it read is kept whole), a run after a day of changes copies the
        few pages that did not change; every pack kept is at least half used, so the cache stays within twice one
        night's pages."""
        removed = 0
        for stream in streams:
            index = self._index.pop(stream, {})
            for pack in self._earlier_packs(stream, (PACK, LEGACY_ENTRY)):
                used = self._used.pop(pack, set())
                if 2 * len(used) >= self._pack_entries.pop(pack, 0) > 0 or _written_at(pack) >= since - STALE_AFTER_S:
                    continue
                for name in used:
                    raw = self._payload(index[name])
                    if raw is not None:
                        self._write_later(stream, name, [raw])
                self._forget_reader(pack)
                self._after_writes(partial(pack.unlink, missing_ok=True))
                removed += 1
        return removed

    def _name(self, location: PageLocation, body: bytes, with_keys: bool) -> str:
        digest = hashlib.sha256(code_fingerprint())
        request = [location.stream, location.endpoint, sorted(location.params.items()), with_keys]
        digest.update(json.dumps(request).encode())
        digest.update(body)
        return f"{location.stream}-{digest.hexdigest()[:40]}"

    def _entries(self, stream: str) -> dict[str, Entry]:
        """Where earlier runs keep the entries of `stream`: its packs indexed once per cache, the newest last."""
        if stream not in self._index:
            index: dict[str, Entry] = {}
            for pack in sorted(self._earlier_packs(stream), key=_written_at):
                entries = pack_entries(pack)
                index.update(entries)
                self._pack_entries[pack] = len(entries)
            self._index[stream] = index
        return self._index[stream]

    def _read_back(
        self, name: str, entry: Entry, location: PageLocation, key_fields: tuple[str, ...] | None
    ) -> Page | None:
        """The page kept as `entry`, noted as used by this run; None when it cannot be read (a miss)."""
        raw = self._payload(entry)
        page = None if raw is None else _decoded(raw, name, entry, location, key_fields)
        if page is not None:
            self._used.setdefault(entry[0], set()).add(name)
        return page

    def _payload(self, entry: Entry) -> bytes | None:
        pack, offset, length = entry
        try:
            if pack not in self._readers:
                self._readers[pack] = os.open(pack, os.O_RDONLY)
            raw = os.pread(self._readers[pack], length, offset)
        except OSError:  # removed by a later run's cleanup before it was opened: a miss
            return None
        return raw if len(raw) == length else None

    def _forget_reader(self, pack: Path) -> None:
        descriptor = self._readers.pop(pack, None)
        if descriptor is not None:
            os.close(descriptor)

    def _earlier_packs(self, stream: str, suffixes: tuple[str, ...] = (PACK,)) -> list[Path]:
        """The packs of `stream` but this cache's (with LEGACY_ENTRY among `suffixes`: also its entries of the
        file-per-page cache), from one listing of the directory."""
        try:
            names = os.listdir(self.directory)
        except OSError:  # none yet, or unusable (warned when written): the cache never fails a stream
            return []
        mine = self._own_pack(stream).name
        return [
            self.directory / name
            for name in names
            if name.endswith(suffixes) and name != mine and name.rpartition(".")[0].rpartition("-")[0] == stream
        ]

    def _own_pack(self, stream: str) -> Path:
        return self.directory / f"{stream}-{self._token}{PACK}"

    def _write_later(self, stream: str, name: str, parts: list[bytes | pa.Buffer]) -> None:
        if self._write_failed:
            return
        if not self._pending.acquire(blocking=False):  # the writer is behind: no more bytes wait for it
            self._write(stream, name, parts)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lessonsync-page-cache")

        def write() -> None:
            try:
                self._write(stream, name, parts)
            finally:
                self._pending.release()

        self._writer.submit(write)

    def _after_writes(self, action: Callable[[], None]) -> None:
        """`action` once the writes asked for so far are done (the writer runs its tasks in order)."""

        def quietly() -> None:
            try:
                action()
            except OSError as error:  # removed meanwhile by another process's run, or not ours to remove
                log.debug("page cache: %s", error)

        if self._writer is None:
            quietly()
        else:
            self._writer.submit(quietly)

    def _write(self, stream: str, name: str, parts: list[bytes | pa.Buffer]) -> None:
        """Append one entry to this cache's pack of `stream`."""
        path = self._own_pack(stream)
        with self._append_lock:
            if self._write_failed:
                return
            try:
                pack = self._packs.get(stream)
                if pack is None:
                    self.directory.mkdir(parents=True, exist_ok=True)
                    pack = self._packs[stream] = open(path, "ab")  # noqa: SIM115 (closed by close())
                encoded = name.encode()
                pack.write(_ENTRY.pack(sum(map(_size, parts)), len(encoded)) + encoded)
                for part in parts:
                    pack.write(part)
            except OSError as error:  # a full or read-only disk costs the next run its decoding, nothing else
                self._write_failed = True
                self._warn_write_failed(path, error)

    def _warn_write_failed(self, path: Path, error: OSError) -> None:
        log.warning(
            "page cache pack %s could not be written (%s); pages are decoded as usual, and this run writes no "
            "more entries (LESSONSYNC_PAGE_CACHE=false turns the cache off)",
            path,
            error,
        )


def pack_entries(pack: Path) -> dict[str, Entry]:
    """Entry name -> (pack, payload offset, payload length) of every whole entry of `pack`, from its start to its
    last whole entry (a pack whose writer was killed ends there)."""
    entries: dict[str, Entry] = {}
    try:
        with open(pack, "rb") as file:
            size, offset = os.fstat(file.fileno()).st_size, 0
            while offset + _ENTRY.size <= size:
                file.seek(offset)
                length, name_length = _ENTRY.unpack(file.read(_ENTRY.size))
                start = offset + _ENTRY.size + name_length
                if start + length > size:
                    break
                entries[file.read(name_length).decode()] = (pack, start, length)
                offset = start + length
    except (OSError, UnicodeDecodeError) as error:  # removed meanwhile, or not a pack: what was read is kept
        log.debug("page cache pack %s read up to an error (%s)", pack, error)
    return entries


def _decoded(
    raw: bytes, name: str, entry: Entry, location: PageLocation, key_fields: tuple[str, ...] | None
) -> Page | None:
    try:
        header_size = _LENGTH.unpack_from(raw)[0]
        header = json.loads(raw[_LENGTH.size : _LENGTH.size + header_size])
        offset, batches = _LENGTH.size + header_size, []
        for table in header["tables"]:
            size = _LENGTH.unpack_from(raw, offset)[0]
            offset += _LENGTH.size
            records = pa.ipc.read_record_batch(pa.py_buffer(raw[offset : offset + size]), TABLES[table].schema)
            offset += size
            batches.append(Batch(TABLES[table], records, location.endpoint, location.page))
    except (ValueError, KeyError, TypeError, struct.error, pa.ArrowException) as error:
        log.warning(
            "page cache entry %s (in %s) could not be read (%s); decoding the page again", name, entry[0], error
        )
        return None
    own = batches[0].records if header["records"] else None
    hashes = None if key_fields is None else key_hashes(own, key_fields, header["records"])
    return Page(location, header["served"], batches, header["records"], 0, hashes, own, from_cache=True)


def _written_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _size(part: bytes | pa.Buffer) -> int:
    return part.size if isinstance(part, pa.Buffer) else len(part)


def _serialized(page: Page) -> list[bytes | pa.Buffer]:
    """An entry's bytes: header length, header (JSON), then each batch's length and Arrow IPC bytes."""
    header = json.dumps(
        {"served": page.served, "records": page.records, "tables": [batch.table.name for batch in page.batches]}
    ).encode()
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
