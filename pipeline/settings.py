"""Settings read from the environment (prefix `LESSONSYNC_`) or a `.env` file; see docs/settings.md."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Annotated, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.settings_checks import (
    AUTO,
    DAY,
    GIB,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    YEAR_HOURS,
    api_prefix_problem,
    duckdb_memory_limit_problem,
)

# The schema contracts of pipeline/contract/evolution.py, spelled here so that reading the settings loads no contract
# (a test checks the two agree); the streams they name are checked against the registry when one is named.
SchemaContract = Literal["evolve", "freeze", "discard_value"]
FirstPage = Literal["auto", "0", "1"]  # AUTO: probed once per client
ModelsRunner = Literal["lessonsync", "dbt"]
TableFormat = Literal["iceberg", "none"]
# AUTO: chosen from the machine when the warehouse is opened (pipeline/warehouse/duck/connection.py,
# memory_limit_for_machine; docs/warehouse.md, "Locks and limits")
DEFAULT_MEMORY_LIMIT = AUTO
DEFAULT_APP_SECRET = (
    "lessonsync-demo-secret"  # what the simulator accepts by default (its own constant); not a real credential
)


# Each part of LessonSync reads its own typed settings, built from the LESSONSYNC_* variables of `Settings` by the
# property of that name (`settings.client`, `settings.warehouse`, ...); a function that reads one part takes that
# part. `SETTINGS` names the variables a part is built from: docs/settings.md lists them under the part's heading
# (pipeline/docs.py), and every variable belongs to exactly one part.


@dataclass(frozen=True)
class ClientSettings:
    """The HTTP client's (pipeline/source/): how the platform is reached and read."""

    TITLE: ClassVar[str] = "The platform and the HTTP client"
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "base_url",
        "app_secret",
        "page_size",
        "first_page",
        "concurrency",
        "page_cache",
        "decode_processes",
        "request_timeout",
        "retry_budget",
        "max_attempts",
        "retry_max_wait",
        "max_response_bytes",
    )

    base_url: str
    app_secret: SecretStr
    page_size: int
    first_page: FirstPage
    concurrency: int
    page_cache_dir: Path | None  # where decoded snapshot pages are kept (pipeline/source/page_cache.py); None: off
    decode_processes: int
    lookback: timedelta  # the answers' plan starts its listings this long before the newest planned lesson
    request_timeout: float
    retry_budget: float
    max_attempts: int
    retry_max_wait: float
    max_response_bytes: int

    @property
    def first_page_number(self) -> int | None:
        """The first pageNumber, None when it is probed (LESSONSYNC_FIRST_PAGE=auto)."""
        return None if self.first_page == AUTO else int(self.first_page)


@dataclass(frozen=True)
class SyncSettings:
    """The raw sync's (pipeline/raw/): the windows each run reads and what new fields become."""

    TITLE: ClassVar[str] = "The raw sync"
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "lookback",
        "safety_margin",
        "answers_refetch",
        "schema_contract",
        "schema_contract_by_stream",
    )

    lookback: timedelta
    safety_margin: timedelta
    answers_refetch: Literal["changed", "window"]
    schema_contract: SchemaContract
    schema_contract_by_stream: dict[str, SchemaContract]

    def schema_contract_of(self, stream: str) -> SchemaContract:
        """The schema contract of `stream` (one of SYNC_STREAMS): its own, else LESSONSYNC_SCHEMA_CONTRACT."""
        return self.schema_contract_by_stream.get(stream, self.schema_contract)


@dataclass(frozen=True)
class WarehouseSettings:
    """The warehouse's (pipeline/warehouse/): its DuckDB file and the limits of every connection to it."""

    TITLE: ClassVar[str] = "The warehouse"
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "data_dir",
        "duckdb_memory_limit",
        "duckdb_threads",
        "duckdb_temp_directory",
        "duckdb_lock_timeout",
    )

    path: Path  # <data_dir>/warehouse.duckdb
    duckdb_memory_limit: str  # a DuckDB size, or AUTO
    duckdb_temp_directory: Path | None
    duckdb_threads: int | None
    duckdb_lock_timeout: float


@dataclass(frozen=True)
class LakeSettings:
    """The lake's (pipeline/warehouse/lake/): where the Parquet parts live and their Iceberg mirror."""

    TITLE: ClassVar[str] = "The lake and its Iceberg tables"
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "lake_url",
        "table_format",
        "iceberg_catalog_url",
        "iceberg_catalog_busy_timeout",
        "iceberg_snapshot_retention",
    )

    location: Path | str  # LESSONSYNC_LAKE_URL, else <data_dir>/lake
    table_format: TableFormat
    # The Iceberg SQL catalog's URL, None when LESSONSYNC_TABLE_FORMAT=none: LESSONSYNC_ICEBERG_CATALOG_URL, else the
    # Dagster instance's PostgreSQL database, else a SQLite file in the data directory
    iceberg_catalog: str | None = field(repr=False)  # a PostgreSQL URL carries its password
    iceberg_catalog_busy_timeout: float
    iceberg_snapshot_retention: timedelta


@dataclass(frozen=True)
class ReceiverSettings:
    """Where the certificate webhooks' inbox lives, for the receiver, the sensor and the load (pipeline/webhooks/).
    The receiver's own settings (LESSONSYNC_WEBHOOK_*) are pipeline.webhooks' WebhookSettings."""

    TITLE: ClassVar[str] = "The certificate inbox"
    SETTINGS: ClassVar[tuple[str, ...]] = ("inbox_url",)

    inbox_url: SecretStr | None
    inbox_path: Path  # the SQLite inbox when no URL is set: <data_dir>/inbox.sqlite3

    def inbox_location(self) -> str | Path:
        """The inbox to open: the PostgreSQL URL when set, else the SQLite file."""
        return self.inbox_url.get_secret_value() if self.inbox_url is not None else self.inbox_path


@dataclass(frozen=True)
class OrchestrationSettings:
    """Dagster's (pipeline/defs/, pipeline/instance/): schedules, sensors, checks, models, alerts and runs."""

    TITLE: ClassVar[str] = "Orchestration: schedules, checks, models, alerts"
    SETTINGS: ClassVar[tuple[str, ...]] = (
        "nightly_cron",
        "freshness_hours",
        "max_deleted_fraction",
        "certificate_sensor_interval",
        "alert_webhook_url",
        "models_dir",
        "models_runner",
        "analytics_as_of",
        "pool_wait_timeout",
        "log_level",
        "log_format",
        "dagster_postgres_url",
    )

    nightly_cron: str
    freshness: timedelta  # LESSONSYNC_FRESHNESS_HOURS
    max_deleted_fraction: float
    certificate_sensor_interval: int
    alert_webhook_url: SecretStr | None
    models_dir: Path | None
    models_runner: ModelsRunner
    analytics_as_of: str | None
    pool_wait_timeout: float
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"]
    log_format: Literal["text", "json"]
    dagster_postgres_url: SecretStr | None
    dagster_home: Path  # when DAGSTER_HOME is unset: <data_dir>/dagster_home


PARTS: tuple[type, ...] = (
    ClientSettings,
    SyncSettings,
    WarehouseSettings,
    LakeSettings,
    ReceiverSettings,
    OrchestrationSettings,
)


class Settings(BaseSettings):
    """How LessonSync reaches the platform and where it keeps its data."""

    model_config = SettingsConfigDict(env_prefix="LESSONSYNC_", env_file=".env", extra="ignore")

    base_url: str = Field(
        "http://127.0.0.1:8765",
        description="Platform address, without `/v1`: the platform's root, or the path prefix a proxy serves it under "
        "(`https://host/lms`); an address ending in `/v1` is refused (LessonSync adds `/v1/...` itself).",
    )
    app_secret: SecretStr = Field(SecretStr(DEFAULT_APP_SECRET), description="Exchanged for API tokens; never logged.")
    data_dir: Path = Field(
        Path("data"),
        description="Warehouse, lake, inbox, Dagster home and published analytics live here (a relative path: from "
        "the working directory the settings are read in).",
    )
    page_size: int = Field(500, ge=1, le=10_000, description="Records asked per page.")
    first_page: FirstPage = Field(
        AUTO, description="First `pageNumber` of the API: `0`, `1`, or `auto`, probed once per client."
    )
    concurrency: int = Field(8, ge=1, le=64, description="Requests in flight, for all the streams of a run together.")
    page_cache: bool = Field(
        True,
        description="Keep the decoded pages of the snapshots (groups, users, lessons, sessions, categories) under "
        "`<data_dir>/cache/pages` (~47 MiB at scale large), so a page the platform serves again byte for byte"
        " is not decoded again; keyed by request, body and decoding code, about one night's pages kept in one"
        " pack file per stream (`false`: decode every page; [warehouse.md](warehouse.md)).",
    )
    decode_processes: int = Field(
        1,
        ge=0,
        le=16,
        description="Worker processes that decode large answer pages beside the client's event loop, so it keeps the "
        "requests in flight (`0`: the client's own thread decodes every page). A worker (84 MiB RSS once "
        "started, more while it decodes a page) starts only for a large answers fetch and is gone before its "
        "commit; what it trades: [BENCHMARKS.md](BENCHMARKS.md#what-each-setting-trades).",
    )
    lookback: timedelta = Field(
        timedelta(minutes=10),
        ge=timedelta(0),
        le=timedelta(days=1),
        description="Each incremental window starts this long before the cursor; must cover the platform's read lag plus "
        "one sweep.",
    )
    safety_margin: timedelta = Field(
        timedelta(seconds=30),
        ge=timedelta(0),
        le=timedelta(days=1),
        description="The cursor never passes the server's run start (`Date` header) minus this.",
    )
    answers_refetch: Literal["changed", "window"] = Field(
        "changed",
        description="Cursor runs ask for the answers of the window's active lessons whose `lastDate` changed since their "
        "answers were loaded (`changed`), or for every active lesson of the window (`window`). Full refreshes"
        " and backfills always refetch their whole window.",
    )
    request_timeout: float = Field(
        30.0,
        ge=MIN_TIMEOUT,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds to connect, and to wait for the next bytes of a response (a whole request never outlasts the"
        " retry budget).",
    )
    retry_budget: float = Field(
        300.0,
        ge=1,  # a request needs at least one try within it
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds one request keeps retrying (429, 5xx, timeouts, connection errors, truncated bodies; backoff"
        " with jitter, `Retry-After` honoured) before the run fails: an outage shorter than this is ridden "
        "out, a platform that drips its answers fails the run within this plus 5 %.",
    )
    max_attempts: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Upper bound on tries per request within the retry budget (the budget normally ends first).",
    )
    max_response_bytes: int = Field(
        256 << 20,
        ge=1 << 16,
        le=4 * GIB,
        description="Largest response body accepted (default 256 MiB, at most 4 GiB); a larger one fails the request, "
        "naming the endpoint.",
    )
    retry_max_wait: float = Field(
        60.0,
        ge=MIN_TIMEOUT,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Cap in seconds on one backoff or `Retry-After` wait (lower it to resume sooner after an outage).",
    )
    alert_webhook_url: SecretStr | None = Field(
        None,
        description="Failed runs are POSTed here as JSON (run, job, step, error) by `failure_alert_sensor`, and by "
        "`lessonsync sync` for its own run; unset: no alerts. A secret, never logged: chat webhooks carry "
        "their token in the URL.",
    )
    duckdb_memory_limit: str = Field(
        DEFAULT_MEMORY_LIMIT,
        description="DuckDB `memory_limit` of every connection (commits, first loads, checks); beyond it work spills to "
        "the temp directory. `auto`: 120MiB per DuckDB thread (`LESSONSYNC_DUCKDB_THREADS`, else the cores), "
        "at least 240MiB, at most a quarter of the available memory; or a size in DuckDB's units (`1GB`, "
        "`512MiB`, `25%` of the machine's memory) from 64MiB, the least a sync runs DuckDB within (the early "
        "insert's own limit), to 16TiB; a negative size (DuckDB: no limit) is refused "
        '([warehouse.md](warehouse.md), "Locks and limits").',
    )
    duckdb_temp_directory: Path | None = Field(
        None, description="Where DuckDB spills; unset: `<warehouse file>.tmp` next to the warehouse."
    )
    duckdb_threads: int | None = Field(
        None, ge=1, le=1024, description="DuckDB threads of every connection; unset: all cores."
    )
    duckdb_lock_timeout: float = Field(
        600.0,
        ge=0,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds to wait for another process (a sync, a rebuild, an analyst's session on `warehouse.duckdb`) "
        "to release the warehouse file, logging the holder's PID every 30 s (`0`: fail at once).",
    )
    nightly_cron: str = Field("0 2 * * *", description="Cron of the `nightly_sync` schedule, in UTC.")
    certificate_sensor_interval: int = Field(
        30, ge=1, le=int(DAY), description="Seconds between two ticks of the certificate inbox sensor."
    )
    freshness_hours: float = Field(
        26.0,
        gt=0,  # no floor: a tiny value marks every table stale, a way to see the check fire
        le=YEAR_HOURS,
        allow_inf_nan=False,
        description="Freshness policy of the progress tables: the nightly run plus slack, in hours (no floor: a tiny "
        "value marks every table stale, a way to see the check fire).",
    )
    max_deleted_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="`not_shrinking` check: share of a table's rows one load may mark deleted.",
    )
    models_dir: Path | None = Field(
        None,
        description="Directory of the SQL models (`staging/` and `marts/`); unset: `dbt_like_sql/` of the project.",
    )
    models_runner: ModelsRunner = Field(
        "lessonsync",
        description="What builds the SQL models: LessonSync's own runner (`lessonsync`), or `dbt` through dagster-dbt "
        "(the `dbt` extra; [dbt.md](dbt.md)).",
    )
    analytics_as_of: str | None = Field(
        None,
        description="Reference instant of the marts' time-relative figures: a date (midnight UTC, `2026-11-02`) or an ISO"
        " 8601 timestamp with offset (`2026-11-02T00:00:00Z`); unset: when the run starts.",
    )
    pool_wait_timeout: float = Field(
        1800.0,
        ge=1,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds a step waits for a slot of the `warehouse` pool before its run fails, naming the run that "
        "holds it (reported every 30 s while it waits; see [After a crash](operations.md#after-a-crash)): far"
        " above one step of a large full refresh (minutes), short enough that a wedged nightly fails the same"
        " night.",
    )
    lake_url: str | None = Field(
        None,
        description="`s3://bucket/prefix`: keep the Parquet lake (parts and manifests) on an S3-compatible store (extra "
        "`s3`); endpoint, region and credentials from `AWS_ENDPOINT_URL`, `AWS_REGION`, "
        "`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` or `AWS_PROFILE`, never logged ([deploy.md](deploy.md))."
        " Unset: `<data_dir>/lake`.",
    )
    dagster_postgres_url: SecretStr | None = Field(
        None,
        description="`postgresql://user:password@host:port/db`: the Dagster instance keeps runs, event logs and schedules"
        " in PostgreSQL (extra `postgres`); the instance config written to `DAGSTER_HOME` names the variable,"
        " never the password. Unset: SQLite in the Dagster home.",
    )
    table_format: TableFormat = Field(
        "iceberg",
        description="`iceberg`: every raw table and published mart also kept as an Apache Iceberg table under "
        "`<lake>/iceberg`, brought up to the warehouse by a step of its own after the commits "
        "([lake-tables.md](lake-tables.md)); `none`: no mirror.",
    )
    iceberg_catalog_url: SecretStr | None = Field(
        None,
        description="The Iceberg SQL catalog (`sqlite:///path` or `postgresql://...`). Unset: the Dagster instance's "
        "PostgreSQL database when `LESSONSYNC_DAGSTER_POSTGRES_URL` is set, else "
        "`<data_dir>/iceberg_catalog.sqlite3`.",
    )
    iceberg_catalog_busy_timeout: float = Field(
        180.0,
        gt=0,
        le=900,
        description="Seconds the Iceberg mirror waits for a SQLite catalog another process holds locked, or for a lock "
        "another session holds in a PostgreSQL catalog (its lock_timeout), before its step fails (the warehouse's write "
        "lock is held meanwhile; the loads are committed already).",
    )
    iceberg_snapshot_retention: timedelta = Field(
        timedelta(days=7),
        ge=timedelta(0),
        le=timedelta(days=3650),
        description="Iceberg snapshots older than this are expired by the `lake_maintenance` job (time travel reaches "
        "back this far).",
    )
    inbox_url: SecretStr | None = Field(
        None,
        description="`postgresql://user:password@host:port/db`: the certificate inbox lives in PostgreSQL, shared by "
        "several webhook receivers, the sensor and the load ([deploy.md](deploy.md)). Unset: "
        "`<data_dir>/inbox.sqlite3`.",
    )
    schema_contract: SchemaContract = Field(
        "evolve",
        description="What a field the platform begins to send becomes: `evolve` a typed column of its table on the load "
        "that first sees it, `freeze` a failure of its stream naming the field, `discard_value` a value kept "
        "in the row's `extra` JSON ([schema-evolution.md](schema-evolution.md)).",
    )
    schema_contract_by_stream: Annotated[dict[str, SchemaContract], NoDecode] = Field(
        default_factory=dict,
        description="Per-stream contracts overriding `LESSONSYNC_SCHEMA_CONTRACT`: "
        '`active_lessons=freeze,lessons=discard_value`, or JSON `{"active_lessons": "freeze"}`, keyed by the '
        "names of the streams a run syncs (`lessonsync status`); another name, contract or shape fails at "
        "load, named.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO",
        description="Console log level of in-process runs (`lessonsync sync`, `demo`); `DEBUG` adds every Dagster engine "
        "event.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Console log format of every command: text, one layout for LessonSync's and Dagster's lines; "
        "json, one object per line (time, level, logger, message, run and step, progress fields) for a log "
        "pipeline.",
    )

    @property
    def freshness(self) -> timedelta:
        return timedelta(hours=self.freshness_hours)

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    def schema_contract_of(self, stream: str) -> SchemaContract:
        """The schema contract of `stream` (one of SYNC_STREAMS): its own, else LESSONSYNC_SCHEMA_CONTRACT."""
        return self.sync.schema_contract_of(stream)

    @field_validator("schema_contract_by_stream", mode="before")
    @classmethod
    def _stream_pairs(cls, value: object) -> object:
        """`stream=contract,...` or a JSON object, read from the variable's text."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("{"):
            try:
                return json.loads(text)
            except ValueError as error:
                raise ValueError(f"not a JSON object ({error}); write e.g. active_lessons=freeze") from None
        pairs = [item.partition("=") for item in text.split(",") if item.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError(
                "write stream=contract pairs separated by commas, e.g. active_lessons=freeze,lessons=evolve"
            )
        return {name.strip(): contract.strip() for name, _, contract in pairs}

    @field_validator("schema_contract_by_stream")
    @classmethod
    def _known_streams(cls, value: dict[str, SchemaContract]) -> dict[str, SchemaContract]:
        if not value:
            return value
        from pipeline.contract.streams import SYNC_STREAMS  # the registry: only when a stream is named

        unknown = sorted(set(value) - set(SYNC_STREAMS))
        if unknown:
            raise ValueError(f"unknown stream(s) {', '.join(unknown)}: name one of {', '.join(SYNC_STREAMS)}")
        return value

    @field_validator("lake_url")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            return None
        if value is not None and (not value.startswith("s3://") or len(value.rstrip("/")) <= len("s3://")):
            raise ValueError(f"LESSONSYNC_LAKE_URL {value!r} must look like s3://bucket or s3://bucket/prefix")
        return value

    @field_validator("base_url")
    @classmethod
    def _platform_address(cls, value: str) -> str:
        problem = http_address_problem(value)
        if problem:
            raise ValueError(f"{problem}; write the platform's address without /v1, e.g. https://lms.example.com")
        if problem := api_prefix_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _duckdb_memory_size(cls, value: str) -> str:
        if value.strip().lower() == AUTO:
            return AUTO
        problem = duckdb_memory_problem(value.strip())
        if problem:
            raise ValueError(f"{value!r} is not a DuckDB memory size ({problem}); write e.g. 2GB or 512MiB")
        if problem := duckdb_memory_limit_problem(value.strip()):
            raise ValueError(problem)
        return value.strip()

    @field_validator("data_dir", "duckdb_temp_directory")
    @classmethod
    def _writable_directory(cls, value: Path | None) -> Path | None:
        """Made absolute against the working directory of the settings' load: a library that changes the process's
        working directory for a while (dagster-dbt, around each dbt invocation) must not move the files a thread
        of ours writes meanwhile."""
        if value is not None and (problem := unwritable_directory_problem(value)):
            raise ValueError(problem)
        return value.absolute() if value is not None else None

    @field_validator("nightly_cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from croniter import croniter  # type: ignore[import-untyped]  # no stubs

        if not croniter.is_valid(value) or len(value.split()) != 5:
            raise ValueError(f"{value!r} is not a cron expression of 5 fields (minute hour day month weekday)")
        return value

    @field_validator("analytics_as_of")
    @classmethod
    def _as_of(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parse_as_of(value)
        return value.strip()

    @property
    def lake_dir(self) -> Path:
        return self.data_dir / "lake"

    @property
    def lake_location(self) -> Path | str:
        """Where the lake lives: LESSONSYNC_LAKE_URL, else <data_dir>/lake."""
        return self.lake_url or self.lake_dir

    @property
    def iceberg_catalog(self) -> str | None:
        """The Iceberg SQL catalog's URL (None when LESSONSYNC_TABLE_FORMAT=none): LESSONSYNC_ICEBERG_CATALOG_URL,
        else the Dagster instance's PostgreSQL database, else a SQLite file in the data directory."""
        if self.table_format == "none":
            return None
        if self.iceberg_catalog_url is not None:
            return self.iceberg_catalog_url.get_secret_value()
        if self.dagster_postgres_url is not None:
            return self.dagster_postgres_url.get_secret_value()
        return f"sqlite:///{(self.data_dir / 'iceberg_catalog.sqlite3').resolve()}"

    @property
    def inbox_path(self) -> Path:
        return self.data_dir / "inbox.sqlite3"

    @property
    def page_cache_dir(self) -> Path | None:
        """Where the client keeps decoded snapshot pages (pipeline/source/page_cache.py), None when off."""
        return self.data_dir / "cache" / "pages" if self.page_cache else None

    @property
    def dagster_home(self) -> Path:
        """The Dagster home LessonSync creates when DAGSTER_HOME is unset (pipeline/instance)."""
        return self.data_dir / "dagster_home"

    @property
    def client(self) -> ClientSettings:
        return ClientSettings(
            base_url=self.base_url,
            app_secret=self.app_secret,
            page_size=self.page_size,
            first_page=self.first_page,
            concurrency=self.concurrency,
            page_cache_dir=self.page_cache_dir,
            decode_processes=self.decode_processes,
            lookback=self.lookback,
            request_timeout=self.request_timeout,
            retry_budget=self.retry_budget,
            max_attempts=self.max_attempts,
            retry_max_wait=self.retry_max_wait,
            max_response_bytes=self.max_response_bytes,
        )

    @property
    def sync(self) -> SyncSettings:
        return SyncSettings(
            lookback=self.lookback,
            safety_margin=self.safety_margin,
            answers_refetch=self.answers_refetch,
            schema_contract=self.schema_contract,
            schema_contract_by_stream=dict(self.schema_contract_by_stream),
        )

    @property
    def warehouse(self) -> WarehouseSettings:
        return WarehouseSettings(
            path=self.warehouse_path,
            duckdb_memory_limit=self.duckdb_memory_limit,
            duckdb_temp_directory=self.duckdb_temp_directory,
            duckdb_threads=self.duckdb_threads,
            duckdb_lock_timeout=self.duckdb_lock_timeout,
        )

    @property
    def lake(self) -> LakeSettings:
        return LakeSettings(
            location=self.lake_location,
            table_format=self.table_format,
            iceberg_catalog=self.iceberg_catalog,
            iceberg_catalog_busy_timeout=self.iceberg_catalog_busy_timeout,
            iceberg_snapshot_retention=self.iceberg_snapshot_retention,
        )

    @property
    def receiver(self) -> ReceiverSettings:
        return ReceiverSettings(inbox_url=self.inbox_url, inbox_path=self.inbox_path)

    @property
    def orchestration(self) -> OrchestrationSettings:
        return OrchestrationSettings(
            nightly_cron=self.nightly_cron,
            freshness=self.freshness,
            max_deleted_fraction=self.max_deleted_fraction,
            certificate_sensor_interval=self.certificate_sensor_interval,
            alert_webhook_url=self.alert_webhook_url,
            models_dir=self.models_dir,
            models_runner=self.models_runner,
            analytics_as_of=self.analytics_as_of,
            pool_wait_timeout=self.pool_wait_timeout,
            log_level=self.log_level,
            log_format=self.log_format,
            dagster_postgres_url=self.dagster_postgres_url,
            dagster_home=self.dagster_home,
        )


def parse_as_of(text: str) -> datetime:
    """An `as_of` as dbt users pass it: a date, meaning midnight UTC (2026-11-02), or an ISO 8601 timestamp with a
    UTC offset (2026-11-02 00:00:00+00, 2026-11-02T00:00:00Z); dbt_like_sql/macros/as_of.sql reads it alike.
    ValueError says what is wrong."""
    text = text.strip()
    try:
        if len(text) == len("2026-11-02"):
            return datetime.combine(date.fromisoformat(text), time(), UTC)
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a date nor an ISO 8601 timestamp, e.g. 2026-11-02 or 2026-11-02T00:00:00Z"
        ) from None
    if instant.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset; add Z or +hh:mm, or give a date (midnight UTC)")
    return instant


class SettingsError(ValueError):
    """Settings that do not validate: one line, each bad setting named with its problem (never a secret's value)."""


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (used by the CLI and tests); SettingsError naming
    every bad setting when some do not validate, before any work starts."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(settings_problems(error)) from None


def settings_problems(error: ValidationError, prefix: str = "LESSONSYNC_") -> str:
    """`LESSONSYNC_NAME: problem; ...` from pydantic's errors (`prefix`: the settings class's variable prefix): the
    messages only, never the input values (pydantic's own messages do not carry them; ours carry them only for
    settings that are not secrets)."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        name = prefix + "_".join(str(part) for part in item["loc"][:1]).upper()
        message = item["msg"].removeprefix("Value error, ")
        problems.append(f"{name}: {message}")
    return "invalid settings: " + "; ".join(problems)


def http_address_problem(value: str) -> str | None:
    """Why `value` is not an absolute http(s) address with a host and no query or fragment; None when it is.
    The value itself is not repeated (an address may carry credentials)."""
    text = value.strip()
    if not text or any(c.isspace() for c in text):
        return "empty or contains spaces: not an address"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"not a valid address ({exc})"
    if parts.scheme not in ("http", "https"):
        shown = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return f"{shown}: the address must start with http:// or https://"
    if not parts.hostname:
        return "no host name"
    if port == 0:
        return "port 0"
    if parts.query or parts.fragment:
        return "the address cannot carry a query (?...) or fragment (#...)"
    return None


@lru_cache(maxsize=32)
def duckdb_memory_problem(value: str) -> str | None:
    """DuckDB's own parser's complaint about `value` as a memory_limit, None when it accepts it."""
    import duckdb

    try:
        duckdb.connect(":memory:", config={"memory_limit": value}).close()
    except duckdb.Error as exc:
        return str(exc).removeprefix("Parser Error: ").strip()
    return None


def unwritable_directory_problem(path: Path) -> str | None:
    """Why LessonSync could not create files under `path` (created first when missing), None when it can."""
    existing = path.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:  # a real file, not os.access: root passes every permission check, not a read-only mount's
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        return f"cannot create files in {existing} ({exc.strerror or exc})"
    return None
