"""Errors of the warehouse layer. Each message names what was wrong, where, and what to do next; none
carries a secret (the warehouse never sees one)."""

from __future__ import annotations

from pathlib import Path


class WarehouseError(RuntimeError):
    """Base of every error raised by pipeline.warehouse."""


class WarehouseLockedError(WarehouseError):
    """Another process holds the DuckDB file: DuckDB allows one writer, or many readers, at a time."""

    def __init__(self, path: Path, holder: str | None) -> None:
        self.path = path
        self.holder = holder
        who = f" ({holder})" if holder else ""
        super().__init__(
            f"warehouse {path} is locked by another process{who}. Only one process may write it at a time: "
            "wait for the running sync or rebuild to finish (or stop it, or close the DuckDB session that "
            "has the file open), then retry."
        )


class WarehouseMissingError(WarehouseError, FileNotFoundError):
    """A read-only open of a warehouse file that does not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(f"warehouse {path} does not exist yet: run a sync (or `lessonsync rebuild`) first.")


class SchemaError(WarehouseError):
    """A table spec or a batch does not fit the warehouse (type change, bad name, wrong columns...)."""


class LakeError(WarehouseError):
    """The Parquet lake is incomplete or inconsistent with the warehouse."""


class MemoryLimitError(WarehouseError):
    """DuckDB ran out of memory within its memory_limit: the work did not fit and could not spill."""

    def __init__(self, where: str, limit: str | None) -> None:
        self.where = where
        self.limit = limit
        within = f"={limit}" if limit else ""
        super().__init__(
            f"DuckDB ran out of memory {where} within LESSONSYNC_DUCKDB_MEMORY_LIMIT{within}; nothing of it was "
            "committed. Raise LESSONSYNC_DUCKDB_MEMORY_LIMIT (e.g. 1GB) or lower LESSONSYNC_DUCKDB_THREADS, then "
            "run it again."
        )
