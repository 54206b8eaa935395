"""A sync that the operating system stopped (disk full, quota, read-only or vanished storage) ends on one line
naming what ran out and where, not on a traceback from whichever layer hit it first (DuckDB, the Parquet lake,
Dagster's SQLite run storage)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.settings import Settings

NO_SPACE_TEXTS = ("no space left on device", "database or disk is full", "disk quota exceeded", "errno 28")
OS_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EIO: "input/output error",
}
LOW_SPACE_BYTES = 8 << 20  # a filesystem with less free is taken as the one that filled up


def os_failure(error: BaseException | str, settings: Settings) -> str | None:
    """'no space left on device writing <path> (...)' when `error` (or a cause of it) is the OS refusing a write;
    None for any other error."""
    chain = _chain(error) if isinstance(error, BaseException) else []
    text = " ".join([str(error)] + [str(e) for e in chain]).lower()
    own = next((e for e in chain if isinstance(e, OSError) and e.errno in OS_ERRNOS), None)
    if own is not None and own.errno is not None:
        problem, where = OS_ERRNOS[own.errno], own.filename or _fullest(settings)
    elif any(marker in text for marker in NO_SPACE_TEXTS):
        problem, where = "no space left on device", _fullest(settings)
    elif "disk i/o error" in text and _free(_fullest(settings)) < LOW_SPACE_BYTES:
        problem, where = "no space left on device", _fullest(settings)  # SQLite's name for a full disk, often
    else:
        return None
    advice = (
        "free some space there, then run the sync again: what did not commit is fetched again"
        if problem in ("no space left on device", "disk quota exceeded")
        else "fix the storage, then run the sync again"
    )
    return f"{problem} writing {where} ({_free_text(where)}); {advice}"


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        item = pending.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        pending += [item.__cause__, item.__context__, getattr(item, "orig", None)]
    return seen


def _fullest(settings: Settings) -> Path:
    """Of the places a sync writes, the one with the least free space."""
    places = [settings.data_dir, settings.dagster_home, settings.warehouse_path.parent]
    if settings.duckdb_temp_directory is not None:
        places.append(settings.duckdb_temp_directory)
    return min(places, key=_free)


def _free(path: Path | str) -> int:
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return 0


def _free_text(path: Path | str) -> str:
    free = _free(path)
    return f"{free / (1 << 20):.1f} MiB free there now"
