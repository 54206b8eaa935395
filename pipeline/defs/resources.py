"""Dagster resources: where the warehouse lives and how the platform is reached, built from the settings by
`build_resources`. Nothing here opens a file or a socket until an asset asks for it, so loading the code location
stays cheap and side-effect free."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import duckdb
from dagster import ConfigurableResource, EnvVar, InitResourceContext
from pydantic import Field, PrivateAttr

from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.operations.runs.identity import current_process, recorded_process
from pipeline.instance.sqlite_writes import sqlite_writes_kept_open
from pipeline.raw.mirror import await_background_mirror, background_mirror_paused
from pipeline.settings import Settings, load_settings
from pipeline.source import PlatformClient
from pipeline.warehouse import Warehouse


class RunSettingsResource(ConfigurableResource[Any]):
    """A resource whose settings (`_load`) are read once, when a run starts, and whenever asked outside a run: a
    run's steps asked for them ~17 times, each a read of the environment and the .env file on the main thread
    (1-2 ms, more while the client's event loop holds the GIL). A change made during a run applies to the next."""

    _run_settings: Settings | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._run_settings = self._load()

    def settings(self) -> Settings:
        return self._run_settings or self._load()

    def _load(self) -> Settings:
        raise NotImplementedError


class WarehouseResource(RunSettingsResource):
    """The DuckDB warehouse and the Parquet lake under one data directory (the lake on object storage when
    LESSONSYNC_LAKE_URL is set)."""

    data_dir: str = Field(description="Warehouse, lake and published analytics live here (LESSONSYNC_DATA_DIR).")
    _storage_writes: ExitStack = PrivateAttr(default_factory=ExitStack)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        super().setup_for_execution(context)
        # A run that writes the warehouse says which process runs it (launched by the daemon or the UI: the CLI tags
        # its runs at creation), so a later run, the dead-run sensor or `lessonsync recover` can tell it died.
        run, instance = context.run, context.instance
        if run is not None and instance is not None and recorded_process(run.run_id, run.tags) is None:
            instance.add_run_tags(run.run_id, current_process().tags(run.run_id))
        # the run's events, until it ends, stored in Dagster's SQLite storage without a disk round trip each
        # (pipeline/instance/sqlite_writes.py), wherever it executes: a run worker the daemon launched, the CLI
        self._storage_writes.enter_context(sqlite_writes_kept_open())

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        self._storage_writes.close()

    def _load(self) -> Settings:
        """DuckDB memory limit, temp directory, threads and lock timeout from LESSONSYNC_DUCKDB_*; the lake
        from LESSONSYNC_LAKE_URL; files under this resource's data directory."""
        return load_settings(data_dir=Path(self.data_dir))

    @property
    def path(self) -> Path:
        return self.settings().warehouse_path

    def warehouse(self) -> Warehouse:
        """The warehouse, once the background Iceberg mirror of a raw step of this process is done with it: no step
        writes or checkpoints the file beside it (pipeline/raw/mirror.py)."""
        settings = self.settings()
        await_background_mirror(settings.warehouse_path)
        return Warehouse.from_settings(settings)

    @contextmanager
    def reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection for a step that only reads (checks): beside a background Iceberg mirror of this
        process, paused meanwhile rather than awaited, so the run goes on while the mirror writes its last tables."""
        settings = self.settings()
        paused = background_mirror_paused(settings.warehouse_path)
        with paused, Warehouse.from_settings(settings).connect(read_only=True) as conn:
            yield conn

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection, closed on exit; a file held by another process raises
        WarehouseLockedError with what to do."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.warehouse().connect() as conn:
            yield conn


class PlatformResource(RunSettingsResource):
    """The platform's developer API. Unset fields fall back to the LESSONSYNC_* settings."""

    base_url: str | None = Field(default=None, description="Platform address without /v1 (LESSONSYNC_BASE_URL).")
    app_secret: str | None = Field(default=None, description="App secret; pass EnvVar('LESSONSYNC_APP_SECRET').")
    page_size: int | None = None
    first_page: str | None = Field(default=None, description="'auto', '0' or '1'.")
    concurrency: int | None = None

    def _load(self) -> Settings:
        """These fields over the LESSONSYNC_* settings."""
        overrides = {
            name: value
            for name in ("base_url", "app_secret", "page_size", "first_page", "concurrency")
            if (value := getattr(self, name)) is not None
        }
        return load_settings(**overrides)

    def client(self) -> PlatformClient:
        return PlatformClient(self.settings())


def build_resources(settings: Settings) -> dict[str, ConfigurableResource[Any]]:
    """The resources every domain shares (a domain's own, like progress's `backfill`, come with it), their paths
    from `settings`. The app secret set in the environment reaches the platform resource as an EnvVar, so the UI shows
    its name, never its value; an unset secret is never put in resource config: the resource reads it from the
    LESSONSYNC_* settings (a `.env` file) when a run starts, like the settings resource config does not carry
    (DuckDB limits, retries, the lake URL)."""
    return {
        # The address as given (a CLI --base-url overrides the environment); the secret only by name.
        "platform": PlatformResource(base_url=settings.base_url, app_secret=_env_var("LESSONSYNC_APP_SECRET")),
        "warehouse": WarehouseResource(data_dir=str(settings.data_dir)),
        "inbox": InboxResource(path=str(settings.inbox_path), url=_env_var("LESSONSYNC_INBOX_URL")),
    }


def _env_var(name: str) -> EnvVar | None:
    return EnvVar(name) if name in os.environ else None
