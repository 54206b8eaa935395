"""The Iceberg data files of a first load, written from its lake parts while it is still fetched.

A first load inserted early (loading/early_insert.py) reads each lake part into its empty table as the part closes;
with an Iceberg mirror, the same thread then writes that part's rows as the mirror holds them (iceberg.py,
`write_first_load_files`): the table's first Iceberg snapshot is written beside the fetch, on a core it leaves idle,
instead of after the commit, when the run waits for it.

The files are only offered to the mirror once the load has committed (`offer`), and it takes them (`take`) only
when the warehouse table holds exactly those rows: as many, every one first and last loaded by that load (a later
load that changed a row moved its last_loaded_at), none deleted, and the mirror's columns the same. They came from
the same parts through the same casts as the rows inserted, so they are those rows; otherwise the mirror writes the
table from the warehouse as it always does. Files nobody takes are deleted: when an offer replaces them, when the
background mirror of the run ends (`discard`), at the latest when the process exits."""

from __future__ import annotations

import atexit
import logging
import shutil
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.connection import database_file
from pipeline.warehouse.duck.tabledef import DELETED_AT, FIRST_LOADED_AT, LAST_LOADED_AT, SCHEMA

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FirstLoadFiles:
    """Data files (in `directory`, nothing else there) holding the `rows` of one table's first load, with the
    mirror's `columns` in order."""

    table: str
    directory: Path
    files: tuple[Path, ...]
    rows: int
    columns: tuple[str, ...]
    loaded_at: datetime

    def delete(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


_offered: dict[tuple[str, str], FirstLoadFiles] = {}  # (warehouse file, table) -> files of its committed first load
_lock = threading.Lock()


def _key(warehouse_path: Path | str, table: str) -> tuple[str, str]:
    return str(Path(warehouse_path).resolve()), table


def offer(warehouse_path: Path, files: FirstLoadFiles) -> None:
    """After the first load's commit: its files, for the mirror of the warehouse at `warehouse_path` to take."""
    with _lock:
        replaced = _offered.pop(_key(warehouse_path, files.table), None)
        _offered[_key(warehouse_path, files.table)] = files
    if replaced is not None:
        replaced.delete()


def take(
    conn: duckdb.DuckDBPyConnection, table: str, columns: tuple[str, ...], deleted_at: bool
) -> FirstLoadFiles | None:
    """The files offered for `table` of the warehouse `conn` is on, if the table holds exactly their rows (module
    docstring); the caller owns them then (and deletes their directory). None otherwise: any offered are deleted."""
    with _lock:
        nothing_offered = not _offered
    if nothing_offered:  # the usual case: the connection is not asked which file it is on
        return None
    key = _key(database_file(conn), table)
    with _lock:
        offered = _offered.pop(key, None)
    if offered is None:
        return None
    live = f" AND {q(DELETED_AT)} IS NULL" if deleted_at else ""
    total, of_load = conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE {q(FIRST_LOADED_AT)} = $at AND {q(LAST_LOADED_AT)} = $at{live}) "
        f"FROM {SCHEMA}.{q(table)}",
        {"at": offered.loaded_at},
    ).fetchall()[0]
    if (
        offered.columns == columns
        and total == of_load == offered.rows
        and all(path.is_file() for path in offered.files)
    ):
        return offered
    log.info("iceberg %s.%s: the files written while it was fetched are not its rows now; written again", SCHEMA, table)
    offered.delete()
    return None


def discard(warehouse_path: Path) -> None:
    """Delete the files offered for the warehouse at `warehouse_path` that no mirror took."""
    prefix = str(Path(warehouse_path).resolve())
    with _lock:
        left = [_offered.pop(key) for key in [k for k in _offered if k[0] == prefix]]
    for files in left:
        files.delete()


@atexit.register
def _discard_all() -> None:
    with _lock:
        left = list(_offered.values())
        _offered.clear()
    for files in left:
        files.delete()
