"""The Parquet files the published snapshot's views read (publish.py): `data/published/<schema>/<relation>/*.parquet`.

Each file is written once, under a temporary name then renamed, and its name says what it holds, so a publish
writes only what changed and reuses every other file as it is:

- a model: `main/<model>/<version>.parquet`, its version the digest of its build's inputs (`analytics._builds`);
- a raw table: `lms/<table>/<content version>-<columns>.parquet`, its rows when its content version (the newest
  load that changed it, warehouse.content_version_ids) was that. A large table is not written whole each time
  it changes: its last whole file (its base) stays, and `<base>.delta-<content version>.parquet` holds the rows
  changed since the base was written (inserted, updated, marked deleted: each such row carries a load time later
  than the base's newest, since loads commit one after another); the view reads the base's rows whose key is not
  in the delta, and the delta's. Once the delta holds more than DELTA_SHARE of the base's rows, the next change
  writes a new base.

A raw table's file need not be written at all: when the warehouse's Iceberg mirror holds the table's rows now in
data files on the same disk (`data_files_of`), those files are hard-linked as its file, a directory
`lms/<table>/<content version>-<columns>.files/`, instead of encoding the rows again (a first load: a copy of the
whole table). Taken only when the files hold the table's columns but last_loaded_at (which the mirror does not
keep), as many rows with the same keys, and every row's last_loaded_at is its first_loaded_at (the view reads it
from there); a link is a name of its own for the same immutable bytes, so the mirror rewriting or expiring its files
later leaves the published ones as they are. Otherwise, or on another disk, the rows are written as above.

`_state.json` keeps the bases (file, rows, newest load time, content version) and the files no snapshot refers to
any more, with since when: such a file is deleted once RETIRED_GRACE has passed, so that a reader that opened the
previous snapshot keeps reading it meanwhile. Losing the state costs a rewrite, never a wrong file: a base is
reused only if its file is there and the load of its content version is still in the warehouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from pipeline.analytics.sql import quote, relation, string_literal
from pipeline.warehouse import insertion_order_not_kept, is_committed_load, read_table_def, scalar

PUBLISHED_DIR = "published"
STATE_FILE = "_state.json"
# How long a file stays after the last snapshot referring to it was replaced: a reader holding that snapshot open
# (a BI tool's session, a long query) keeps reading it meanwhile; after it, such a reader must reopen the snapshot.
RETIRED_GRACE = timedelta(hours=24)
DELTA_MIN_ROWS = 500_000  # a smaller raw table is written whole when it changes
DELTA_SHARE = 0.10  # a delta larger than this share of its base's rows: a new base instead
_LOADED_AT, _FIRST_LOADED_AT, _DELETED_AT = "last_loaded_at", "first_loaded_at", "deleted_at"
LINKED = ".files"  # the suffix of a directory of linked data files (module docstring)
# A raw table's Iceberg data files, when they hold its rows now (IcebergMirror.current_data_files); None: they do not.
DataFilesOf = Callable[[duckdb.DuckDBPyConnection, str], "list[Path] | None"]


@dataclass
class PublishedFiles:
    """The files of one publish: what it wrote, what its snapshot refers to, and the state carried over."""

    data_dir: Path
    rewrite: bool = False  # write every file anew, reusing none (and linking none)
    data_files_of: DataFilesOf | None = None  # the Iceberg mirror's files of a raw table, to link (module docstring)
    referenced: set[str] = field(default_factory=set)  # paths relative to `root`
    written: dict[str, int] = field(default_factory=dict)  # path relative to `root` -> bytes
    _state: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._state = _read_json(self.root / STATE_FILE)
        self._state.setdefault("bases", {})
        self._state.setdefault("retired", {})

    @property
    def root(self) -> Path:
        return self.data_dir / PUBLISHED_DIR

    def model_select(
        self, conn: duckdb.DuckDBPyConnection, schema: str, name: str, version: str, columns: list[tuple[str, str]]
    ) -> str:
        """The SELECT over the file holding `schema.name` at `version` (written now if missing), with `columns`
        (name, type): a model's, a bookkeeping column left out by the caller, in the model's row order."""
        path = f"main/{name}/{version}.parquet"
        listed = ", ".join(quote(c) for c, _ in columns)
        self._write_if_missing(conn, path, f"SELECT {listed} FROM {relation(schema, name)}", ordered=True)
        return self._select([path], columns)

    def raw_select(self, conn: duckdb.DuckDBPyConnection, schema: str, table: str, version: str) -> str:
        """The SELECT over the files holding the raw table `schema.table` at `version` (the newest load that wrote
        it; "0": none did, then the table is written anew each publish unless it is empty)."""
        columns = _columns(conn, schema, table)
        layout = _digest(columns)
        bases: dict[str, Any] = self._state["bases"]
        definition = read_table_def(conn, table)
        key = tuple(definition.key) if definition is not None else ()
        changed_at = _changed_at({c for c, _ in columns})
        source = relation(schema, table)
        rows = _rows(conn, source)
        if version == "0" or not key or changed_at is None or rows < DELTA_MIN_ROWS:
            bases.pop(table, None)
            # no load changed the table: empty (its one state), else rows written by hand, written anew each time
            name = version if version != "0" else "0-empty" if rows == 0 else f"0-{uuid.uuid4().hex}"
            whole = f"lms/{table}/{name}-{layout}.parquet"
            linked = self._linked(conn, source, table, whole, columns, key) if version != "0" else None
            if linked is not None:
                return self._select(linked, columns)
            self._write_if_missing(conn, whole, f"SELECT * FROM {source}", ordered=False)
            return self._select([whole], columns)
        base = bases.get(table)
        if base is not None and not self._base_usable(conn, base, layout):
            base = None
        if base is not None and base["version"] != version:
            base = self._with_delta(conn, source, base, version, changed_at)
        if base is None:
            path = f"lms/{table}/{version}-{layout}.parquet"
            linked = self._linked(conn, source, table, path, columns, key)
            base = self._new_base(conn, source, path, layout, version, changed_at, linked)
        bases[table] = base
        if base["delta"] is None:
            return self._select(_base_files(base), columns)
        return self._select_with_delta(_base_files(base), base["delta"], columns, key)

    def retire_and_save(self, now: datetime, grace: timedelta = RETIRED_GRACE) -> list[str]:
        """After the snapshot referring to `referenced` replaced the previous one: note every other file as
        retired (since now, unless it already was), delete those retired for longer than `grace`, save the state.
        Returns the files deleted."""
        retired: dict[str, str] = {
            path: since for path, since in self._state["retired"].items() if path not in self.referenced
        }
        deleted = []
        for path in self._files():
            if path in self.referenced:
                continue
            since = retired.setdefault(path, now.isoformat())
            if now - datetime.fromisoformat(since) >= grace:
                (self.root / path).unlink(missing_ok=True)
                retired.pop(path)
                deleted.append(path)
        self._state["retired"] = {path: since for path, since in retired.items() if (self.root / path).exists()}
        _remove_empty_directories(self.root)
        _write_json(self.root / STATE_FILE, self._state)
        return deleted

    def remove_leftovers(self) -> None:
        """Temporary files and link directories of a publish that was killed (one publish runs at a time: pool
        `warehouse`)."""
        for path in list(self.root.rglob(".*.tmp")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _base_usable(self, conn: duckdb.DuckDBPyConnection, base: dict[str, Any], layout: str) -> bool:
        """The base holds rows of this warehouse's history (its load is here: not another warehouse synced anew
        into the same data directory), with today's columns, and its files are there."""
        files = _base_files(base) + ([base["delta"]] if base.get("delta") else [])
        return (
            not self.rewrite
            and base.get("layout") == layout
            and all((self.root / f).exists() for f in files)
            and is_committed_load(conn, base["version_of_base"])
        )

    def _new_base(
        self,
        conn: duckdb.DuckDBPyConnection,
        source: str,
        path: str,
        layout: str,
        version: str,
        changed_at: str,
        linked: list[str] | None,
    ) -> dict[str, Any]:
        """The table written whole (or its `linked` files), as the base of the deltas to come."""
        with _one_snapshot(conn):  # the newest change and the count agree with the rows written
            newest = scalar(conn, f"SELECT max({changed_at}) FROM {source}")
            rows = _rows(conn, source)
            if linked is None:
                self._write_if_missing(conn, path, f"SELECT * FROM {source}", ordered=False)
        return {
            "file": path,  # a linked base has no such file: its deltas are named after it
            "files": linked or [path],
            "layout": layout,
            "version_of_base": version,
            "version": version,
            "newest": newest.isoformat() if newest is not None else None,
            "rows": rows,
            "delta": None,
            "delta_rows": 0,
        }

    def _with_delta(
        self, conn: duckdb.DuckDBPyConnection, source: str, base: dict[str, Any], version: str, changed_at: str
    ) -> dict[str, Any] | None:
        """`base` with the delta of `version`: the rows changed since the base was written. None when they are more
        than DELTA_SHARE of the base's rows: a new base is cheaper to read."""
        path = f"{base['file'].removesuffix('.parquet')}.delta-{version}.parquet"
        since = "'-infinity'" if base["newest"] is None else string_literal(base["newest"])
        changed = f"SELECT * FROM {source} WHERE {changed_at} > {since}::TIMESTAMPTZ"
        with _one_snapshot(conn):
            rows = int(scalar(conn, f"SELECT count(*) FROM ({changed})"))
            if rows > base["rows"] * DELTA_SHARE:
                return None
            self._write_if_missing(conn, path, changed, ordered=False)
        return {**base, "delta": path, "version": version, "delta_rows": rows}

    def _write_if_missing(self, conn: duckdb.DuckDBPyConnection, path: str, query: str, *, ordered: bool) -> None:
        """`query`'s rows as the Parquet file `path` (zstd), unless it is there already (its name says what it
        holds). Written to a temporary name and renamed, so a file under its name is always whole."""
        target = self.root / path
        if target.exists() and not (self.rewrite and path not in self.written):
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            # rows without an order of their own are written on every core
            with nullcontext() if ordered else insertion_order_not_kept(conn):
                conn.execute(f"COPY ({query}) TO {string_literal(str(temp))} (FORMAT parquet, COMPRESSION zstd)")
            durable_replace(temp, target)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        self.written[path] = target.stat().st_size

    def _linked(
        self,
        conn: duckdb.DuckDBPyConnection,
        source: str,
        table: str,
        path: str,
        columns: list[tuple[str, str]],
        key: tuple[str, ...],
    ) -> list[str] | None:
        """The raw table's published file `path` as the Iceberg mirror's data files, linked (module docstring): the
        files under `root`, or None when they are not taken (the caller writes `path`)."""
        directory = f"{path.removesuffix('.parquet')}{LINKED}"
        target = self.root / directory
        names = {name for name, _ in columns}
        if self.rewrite or self.data_files_of is None or not key or not {_LOADED_AT, _FIRST_LOADED_AT} <= names:
            return None
        if (self.root / path).exists():  # written by an earlier publish: reused as it is, without asking the mirror
            return None
        if not target.is_dir():
            if _loaded_again(conn, source):  # asked first: it costs a scan, the mirror's files a catalog read
                return None
            files = self.data_files_of(conn, table)
            if not files or not _hold_the_table(conn, source, files, columns, key):
                return None
            if not _link_into(files, target):
                return None
        return sorted(str(p.relative_to(self.root)) for p in target.glob("*.parquet"))

    def _literal(self, path: str) -> str:
        return string_literal(str((self.root / path).resolve()))

    def _select(self, paths: list[str], columns: list[tuple[str, str]]) -> str:
        self.referenced.update(paths)
        files = ", ".join(self._literal(p) for p in paths)
        return f"SELECT {_cast_list(columns, linked=_is_linked(paths))} FROM read_parquet([{files}])"

    def _select_with_delta(
        self, base: list[str], delta: str, columns: list[tuple[str, str]], key: tuple[str, ...]
    ) -> str:
        self.referenced.update((*base, delta))
        same_key = " AND ".join(f"d.{quote(k)} = b.{quote(k)}" for k in key)
        base_files = ", ".join(self._literal(p) for p in base)
        return (
            f"SELECT {_cast_list(columns, 'b.', linked=_is_linked(base))} FROM read_parquet([{base_files}]) AS b "
            f"WHERE NOT EXISTS (SELECT 1 FROM read_parquet({self._literal(delta)}) AS d WHERE {same_key})\n"
            f"UNION ALL\nSELECT {_cast_list(columns)} FROM read_parquet({self._literal(delta)})"
        )

    def _files(self) -> Iterator[str]:
        for path in sorted(self.root.rglob("*.parquet")):
            relative = path.relative_to(self.root)
            if not any(part.startswith(".") for part in relative.parts):
                yield str(relative)


def _columns(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[tuple[str, str]]:
    return [
        (name, type_)
        for name, type_ in conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = ? AND table_name = ? ORDER BY column_index",
            [schema, table],
        ).fetchall()
    ]


def _rows(conn: duckdb.DuckDBPyConnection, source: str) -> int:
    return int(scalar(conn, f"SELECT count(*) FROM {source}"))


@contextmanager
def _one_snapshot(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The statements of the block read one state of the warehouse (a transaction, rolled back: nothing is
    written in the warehouse)."""
    conn.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")


def _changed_at(columns: set[str]) -> str | None:
    """When a row of a raw table last changed, as SQL: a load writes last_loaded_at on the rows it inserts or
    updates and deleted_at on those it marks deleted. None: the table has no load times."""
    if _LOADED_AT not in columns:
        return None
    if _DELETED_AT not in columns:
        return quote(_LOADED_AT)
    return f"greatest({quote(_LOADED_AT)}, {quote(_DELETED_AT)})"


def _cast_list(columns: Iterable[tuple[str, str]], prefix: str = "", *, linked: bool = False) -> str:
    """Each column cast to the type it has in the warehouse (a Parquet file keeps a JSON or ENUM value as text);
    `linked`: the files are the Iceberg mirror's, where last_loaded_at is first_loaded_at (PublishedFiles._linked)."""
    return ", ".join(
        f"CAST({prefix}{quote(_FIRST_LOADED_AT if linked and name == _LOADED_AT else name)} AS {type_}) AS {quote(name)}"
        for name, type_ in columns
    )


def _base_files(base: dict[str, Any]) -> list[str]:
    """A base's files: its one file, or its linked ones (a state saved before links lists no `files`)."""
    files = base.get("files")
    return list(files) if files else [base["file"]]


def _is_linked(paths: Iterable[str]) -> bool:
    return any(f"{LINKED}/" in path for path in paths)


def _hold_the_table(
    conn: duckdb.DuckDBPyConnection,
    source: str,
    files: list[Path],
    columns: list[tuple[str, str]],
    key: tuple[str, ...],
) -> bool:
    """Whether `files` hold `source`'s rows as the mirror writes them: its columns in order but last_loaded_at, as
    many rows, the same keys (an XOR of their hashes, each read as the warehouse types it)."""
    listed = f"read_parquet([{', '.join(string_literal(str(f)) for f in files)}])"
    types = dict(columns)
    digest = f"count(*), bit_xor(hash({', '.join(f'CAST({quote(k)} AS {types[k]})' for k in key)}))"
    try:
        written = [name for (name, *_) in conn.execute(f"DESCRIBE SELECT * FROM {listed}").fetchall()]
        if written != [name for name, _ in columns if name != _LOADED_AT]:
            return False
        return bool(
            conn.execute(f"SELECT {digest} FROM {source}").fetchone()
            == conn.execute(f"SELECT {digest} FROM {listed}").fetchone()
        )
    except duckdb.Error:  # files of other columns (written before a column was added), unreadable, or a key whose
        return False  # text does not cast: the rows are written as always


def _loaded_again(conn: duckdb.DuckDBPyConnection, source: str) -> bool:
    """Whether a row of the raw table was loaded again after its first load (the mirror's files do not keep
    last_loaded_at: a linked file's view reads first_loaded_at in its place)."""
    return bool(
        scalar(
            conn, f"SELECT count(*) FROM {source} WHERE {quote(_LOADED_AT)} IS DISTINCT FROM {quote(_FIRST_LOADED_AT)}"
        )
    )


def _link_into(files: list[Path], target: Path) -> bool:
    """Hard links to `files` in the new directory `target` (made under a temporary name, then renamed: a directory
    under its name holds every link); False when the files are on another file system, or linking fails."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        temp.mkdir(parents=True)
        for number, file in enumerate(files):
            os.link(file, temp / f"{number:05d}.parquet")
        os.rename(temp, target)
    except OSError:
        shutil.rmtree(temp, ignore_errors=True)
        return False
    return True


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()[:12]


def _remove_empty_directories(root: Path) -> None:
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(directory.iterdir()):
            directory.rmdir()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    temp.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    durable_replace(temp, path)


def durable_replace(temp: Path, target: Path) -> None:
    """Durable atomic replacement: the data reaches the disk before the name points at it."""
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
