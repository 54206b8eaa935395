"""Settings read from the environment (prefix `LESSONSYNC_`) or a `.env` file; see docs/settings.md."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pipeline.settings_checks import (
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
# "auto" (pipeline.warehouse.duck.connection.AUTO_MEMORY_LIMIT): chosen from the machine when the warehouse is opened
# (memory_limit_for_machine there; docs/warehouse.md, "Locks and limits")
DEFAULT_MEMORY_LIMIT = "auto"
DEFAULT_APP_SECRET = (
    "lessonsync-demo-secret"  # what the simulator accepts by default (its own constant); not a real credential
)


class Settings(BaseSettings):
    """How LessonSync reaches the platform and where it keeps its data."""

    model_config = SettingsConfigDict(env_prefix="LESSONSYNC_", env_file=".env", extra="ignore")

    base_url: str = Field("http://127.0.0.1:8765", description="Platform address, without the /v1 prefix.")
    app_secret: SecretStr = Field(SecretStr(DEFAULT_APP_SECRET), description="Exchanged for API tokens.")
    data_dir: Path = Field(Path("data"), description="Warehouse, lake, inbox and Dagster home live here.")
    page_size: int = Field(500, ge=1, le=10_000, description="Records asked per page.")
    first_page: Literal["auto", "0", "1"] = Field(
        "auto", description="First pageNumber of the API; 'auto' probes it once per client."
    )
    concurrency: int = Field(8, ge=1, le=64, description="Requests in flight at once.")
    page_cache: bool = Field(
        True,
        description="Keep the decoded pages of the snapshots (groups, users, lessons, sessions, categories) "
        "under <data_dir>/cache/pages, so a page served again byte for byte is not decoded again (false: decode all).",
    )
    decode_processes: int = Field(
        1,
        ge=0,
        le=16,
        description="Worker processes decoding large answer pages beside the client's event loop, "
        "so it keeps the requests in flight (0: the client's own thread decodes every page).",
    )
    lookback: timedelta = Field(
        timedelta(minutes=10),
        ge=timedelta(0),
        le=timedelta(days=1),
        description="Each window starts this long before the cursor.",
    )
    safety_margin: timedelta = Field(
        timedelta(seconds=30),
        ge=timedelta(0),
        le=timedelta(days=1),
        description="The cursor never passes run start minus this margin.",
    )
    answers_refetch: Literal["changed", "window"] = Field(
        "changed",
        description="Cursor runs: 'changed' asks for the answers of the window's active lessons whose lastDate "
        "differs from the one whose answers the warehouse holds; 'window' asks for every active lesson of the "
        "window. Full refreshes and backfills always refetch their whole window.",
    )
    request_timeout: float = Field(
        30.0,
        ge=MIN_TIMEOUT,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds to connect, and to wait for the next bytes of a response; a request as a whole, "
        "retries included, never outlasts LESSONSYNC_RETRY_BUDGET.",
    )
    retry_budget: float = Field(
        300.0,
        ge=1,  # a request needs at least one try within it
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds one request may take, all its tries, waits and bodies included (backoff with "
        "jitter, Retry-After honoured), before the run fails: a platform outage shorter than this is ridden out, "
        "a platform that drips its answers fails the run within this plus 5 %.",
    )
    max_attempts: int = Field(
        100, ge=1, le=10_000, description="Upper bound on tries per request; the retry budget normally ends first."
    )
    max_response_bytes: int = Field(
        256 << 20,
        ge=1 << 16,
        le=4 * GIB,
        description="Largest response body accepted; a larger one fails the request.",
    )
    retry_max_wait: float = Field(
        60.0,
        ge=MIN_TIMEOUT,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Cap in seconds on one backoff or Retry-After wait.",
    )
    alert_webhook_url: SecretStr | None = Field(
        None,
        description="Failed runs are POSTed here as JSON (run, job, step, error); unset: no alerts. Secret: "
        "chat webhooks carry their token in the URL.",
    )
    duckdb_memory_limit: str = Field(
        DEFAULT_MEMORY_LIMIT,
        description="DuckDB memory_limit of every connection (commits, first loads, checks); beyond it work "
        "spills to the temp directory. 'auto': 128MiB per DuckDB thread, at least 256MiB, at most a quarter of "
        "the available memory (docs/warehouse.md).",
    )
    duckdb_temp_directory: Path | None = Field(
        None, description="Where DuckDB spills; default: <warehouse file>.tmp next to the warehouse."
    )
    duckdb_threads: int | None = Field(None, ge=1, le=1024, description="DuckDB threads; default: all cores.")
    duckdb_lock_timeout: float = Field(
        600.0,
        ge=0,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds to wait for another process (a sync, a rebuild, an analyst's session on "
        "warehouse.duckdb) to release the warehouse file, logging the holder's PID every 30 s.",
    )
    nightly_cron: str = Field("0 2 * * *", description="Cron of the nightly_sync schedule, in UTC.")
    certificate_sensor_interval: int = Field(
        30, ge=1, le=int(DAY), description="Seconds between two ticks of the certificate inbox sensor."
    )
    freshness_hours: float = Field(
        26.0,
        gt=0,  # no floor: a tiny value marks every table stale, a way to see the check fire
        le=YEAR_HOURS,
        allow_inf_nan=False,
        description="Freshness policy of the progress tables: the nightly run plus slack, in hours.",
    )
    max_deleted_fraction: float = Field(
        0.2,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="not_shrinking check: share of a table's rows one load may mark deleted.",
    )
    models_dir: Path | None = Field(
        None, description="Directory of the SQL models (staging/ and marts/); default: dbt_like_sql/ of the project."
    )
    models_runner: Literal["lessonsync", "dbt"] = Field(
        "lessonsync",
        description="What builds the SQL models: LessonSync's own runner, or dbt through dagster-dbt (the `dbt` "
        "extra; docs/dbt.md).",
    )
    analytics_as_of: str | None = Field(
        None,
        description="Reference instant of the marts' time-relative figures: a date (midnight UTC) or an ISO 8601 "
        "timestamp with offset; default: when the run starts.",
    )
    pool_wait_timeout: float = Field(
        1800.0,
        ge=1,
        le=MAX_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds a step waits for a slot of the `warehouse` pool before its run fails, "
        "naming the run that holds it (reported every 30 s while it waits).",
    )
    lake_url: str | None = Field(
        None,
        description="s3://bucket/prefix: keep the Parquet lake (parts and manifests) on an S3-compatible store; "
        "endpoint, region and credentials from the AWS_* variables. Unset: <data_dir>/lake.",
    )
    dagster_postgres_url: SecretStr | None = Field(
        None,
        description="postgresql://user:password@host:port/db: the Dagster instance keeps runs, event logs and "
        "schedules in PostgreSQL (dagster-postgres). Unset: SQLite in the Dagster home.",
    )
    table_format: Literal["iceberg", "none"] = Field(
        "iceberg",
        description="iceberg: every raw table and published mart also kept as an Apache Iceberg table under "
        "<lake>/iceberg, brought up to the warehouse by a step of its own after the commits (docs/lake-tables.md); "
        "none: no mirror.",
    )
    iceberg_catalog_url: SecretStr | None = Field(
        None,
        description="The Iceberg SQL catalog (sqlite:///path or postgresql://...). Unset: the Dagster instance's "
        "PostgreSQL database when LESSONSYNC_DAGSTER_POSTGRES_URL is set, else <data_dir>/iceberg_catalog.sqlite3.",
    )
    iceberg_catalog_busy_timeout: float = Field(
        180.0,
        gt=0,
        le=900,
        description="Seconds the Iceberg mirror waits for a SQLite catalog another process holds locked before its "
        "step fails (the warehouse's write lock is held meanwhile; the loads are committed already).",
    )
    iceberg_snapshot_retention: timedelta = Field(
        timedelta(days=7),
        ge=timedelta(0),
        le=timedelta(days=3650),
        description="Iceberg snapshots older than this are expired by the lake_maintenance job (time travel "
        "reaches back this far).",
    )
    inbox_url: SecretStr | None = Field(
        None,
        description="postgresql://user:password@host:port/db: the certificate inbox lives in PostgreSQL, shared by "
        "several webhook receivers, the sensor and the load (docs/deploy.md). Unset: <data_dir>/inbox.sqlite3.",
    )
    schema_contract: SchemaContract = Field(
        "evolve",
        description="What a field the platform begins to send becomes: 'evolve' a typed column of its table on the "
        "load that first sees it, 'freeze' a failure of its stream naming the field, 'discard_value' a value kept "
        "in the row's extra JSON (docs/schema-evolution.md).",
    )
    schema_contract_by_stream: Annotated[dict[str, SchemaContract], NoDecode] = Field(
        default_factory=dict,
        description="Per-stream contracts overriding LESSONSYNC_SCHEMA_CONTRACT: active_lessons=freeze,lessons=evolve "
        '(or JSON, {"active_lessons": "freeze"}), keyed by the names of the streams a run syncs (lessonsync status).',
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO",
        description="Console log level of in-process runs (lessonsync sync, demo); DEBUG adds every "
        "Dagster engine event.",
    )

    @property
    def freshness(self) -> timedelta:
        return timedelta(hours=self.freshness_hours)

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    def schema_contract_of(self, stream: str) -> SchemaContract:
        """The schema contract of `stream` (one of SYNC_STREAMS): its own, else LESSONSYNC_SCHEMA_CONTRACT."""
        return self.schema_contract_by_stream.get(stream, self.schema_contract)

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
        if value.strip().lower() == DEFAULT_MEMORY_LIMIT:
            return DEFAULT_MEMORY_LIMIT
        problem = duckdb_memory_problem(value.strip())
        if problem:
            raise ValueError(f"{value!r} is not a DuckDB memory size ({problem}); write e.g. 2GB or 512MiB")
        if problem := duckdb_memory_limit_problem(value.strip()):
            raise ValueError(problem)
        return value.strip()

    @field_validator("data_dir", "duckdb_temp_directory")
    @classmethod
    def _writable_directory(cls, value: Path | None) -> Path | None:
        if value is not None and (problem := unwritable_directory_problem(value)):
            raise ValueError(problem)
        return value

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
