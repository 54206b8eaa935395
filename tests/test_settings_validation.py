"""Settings are validated before any work: a wrong value fails `lessonsync sync` at once (no retrying of a bad
address, no run started) and the code location's load (`dagster definitions validate`, `make dev`, the daemon's
run workers), with one line naming each setting and its problem, never a secret's value. Every limit a setting
sets (timeouts, sizes, counts, caps, the DuckDB memory limit) has a finite range, so that no value (`inf`, `1e308`,
`1e-9`, a negative size) switches it off or makes it unworkable; a command's numeric argument out of range is one
line and status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import typing
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from pipeline.settings import Settings, SettingsError, load_settings
from pipeline.warehouse import Warehouse
from pipeline.webhooks import open_inbox
from pipeline.webhooks import settings as webhook_settings
from pipeline.webhooks.dead_letters import resolve_dead_letter
from pipeline.webhooks.settings import WebhookSettings

BIN = Path(sys.executable).parent
SECRET = "s3cr3t-value-never-shown"

BAD = {
    "LESSONSYNC_BASE_URL": [
        ("not a url", "contains spaces"),
        ("ftp://platform.example", "scheme 'ftp'"),
        ("platform.example:8765", "http:// or https://"),
        ("http://", "no host name"),
        ("http://platform.example/?a=1", "query"),
        ("http://platform.example/v1", "ends in /v1: give the platform's root"),  # asked /v1/v1/token: a 404
        ("https://platform.example/lms/v1/", "ends in /v1"),
    ],
    "LESSONSYNC_DUCKDB_MEMORY_LIMIT": [
        ("lots", "not a DuckDB memory size"),
        ("100", "not a DuckDB memory size"),
        ("-5GB", "negative, which DuckDB reads as no limit"),
        ("-1", "negative"),
        ("1KB", "below the 64MiB a sync needs"),  # else DuckDB's own out-of-memory text in the first statement
        ("0GB", "below the 64MiB"),
        ("0%", "below the 64MiB"),
        ("100000TB", "above 16TiB"),
    ],
    "LESSONSYNC_NIGHTLY_CRON": [("every night", "not a cron expression"), ("0 2 * *", "5 fields")],
    "LESSONSYNC_ANALYTICS_AS_OF": [("2026-13-01T00:00:00Z", "ISO 8601"), ("2026-01-31T00:00:00", "no UTC offset")],
    "LESSONSYNC_DATA_DIR": [("/proc/lessonsync", "cannot create files")],
    "LESSONSYNC_RETRY_BUDGET": [("-5", "greater than or equal to 1"), ("1e-9", "greater than or equal to 1")],
    "LESSONSYNC_REQUEST_TIMEOUT": [
        ("inf", "finite number"),
        ("nan", "finite number"),
        ("1e308", "less than or equal to 86400"),
        ("1e12", "less than or equal to 86400"),
        ("1e23", "less than or equal to 86400"),
        ("1e-9", "greater than or equal to 0.1"),
    ],
    "LESSONSYNC_RETRY_MAX_WAIT": [("inf", "finite number"), ("1e-9", "greater than or equal to 0.1")],
    "LESSONSYNC_POOL_WAIT_TIMEOUT": [("1e308", "less than or equal to 86400"), ("1e-9", "greater than or equal to 1")],
    "LESSONSYNC_DUCKDB_LOCK_TIMEOUT": [("inf", "finite number"), ("1e12", "less than or equal to 86400")],
    "LESSONSYNC_FRESHNESS_HOURS": [("inf", "finite number"), ("1e308", "less than or equal to 8760")],
    "LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL": [("1000000000000", "less than or equal to 86400")],
    "LESSONSYNC_MAX_RESPONSE_BYTES": [("1000000000000", "less than or equal to 4294967296")],
    "LESSONSYNC_DUCKDB_THREADS": [("1000000", "less than or equal to 1024")],
    "LESSONSYNC_LOOKBACK": [("P400D", "less than or equal to 1 day"), ("-PT10M", "greater than or equal to 0")],
    "LESSONSYNC_SAFETY_MARGIN": [("-PT30S", "greater than or equal to 0")],
    "LESSONSYNC_ICEBERG_SNAPSHOT_RETENTION": [("P100000D", "less than or equal to 3650 days")],
    "LESSONSYNC_SCHEMA_CONTRACT": [("strict", "'evolve', 'freeze' or 'discard_value'")],
    "LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM": [
        ("active=freeze", "unknown stream(s) active: name one of active_lessons, answers"),
        ("lessons=frozen", "'evolve', 'freeze' or 'discard_value'"),
        ("lessons", "stream=contract pairs"),
        ('{"lessons": ', "not a JSON object"),
    ],
}
CASES = [(name, value, problem) for name, values in BAD.items() for value, problem in values]


def _clean_env(tmp_path: Path, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_")}
    return {**env, "LESSONSYNC_DATA_DIR": str(tmp_path / "data"), "LESSONSYNC_APP_SECRET": SECRET, **values}


@pytest.mark.parametrize(("name", "value", "problem"), CASES)
def test_a_wrong_setting_is_named_with_its_problem(
    name: str, value: str, problem: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as failure:
        load_settings()
    message = str(failure.value)
    assert "\n" not in message and f"{name}: " in message and problem in message, message


def test_the_schema_contract_per_stream_names_the_streams_a_run_syncs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pipeline.contract.evolution import SCHEMA_CONTRACTS
    from pipeline.contract.streams import STREAM_TABLES
    from pipeline.settings import SchemaContract

    assert typing.get_args(SchemaContract) == SCHEMA_CONTRACTS  # the settings spell the contract's names
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LESSONSYNC_SCHEMA_CONTRACT", "discard_value")
    monkeypatch.setenv("LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM", "active_lessons=freeze, lessons=evolve")
    settings = load_settings()
    assert [settings.schema_contract_of(s) for s in STREAM_TABLES] == [
        "freeze", "discard_value", "discard_value", "discard_value", "discard_value", "evolve"
    ]  # fmt: skip
    monkeypatch.setenv("LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM", '{"answers": "freeze"}')
    assert load_settings().schema_contract_of("answers") == "freeze"
    for stream in STREAM_TABLES:  # every stream of a run can be named
        monkeypatch.setenv("LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM", f"{stream}=freeze")
        assert load_settings().schema_contract_of(stream) == "freeze"


# The receiver's limits (LESSONSYNC_WEBHOOK_*): the values reported to switch them off or to make every delivery 408.
WEBHOOK_BAD = {
    "LESSONSYNC_WEBHOOK_HEADER_TIMEOUT": [
        ("1e-9", "greater than or equal to 0.1"),
        ("inf", "finite number"),
        ("nan", "finite number"),
        ("1e308", "less than or equal to 3600"),
        ("0", "greater than or equal to 0.1"),
    ],
    "LESSONSYNC_WEBHOOK_BODY_TIMEOUT": [("inf", "finite number"), ("1e12", "less than or equal to 3600")],
    "LESSONSYNC_WEBHOOK_KEEP_ALIVE_TIMEOUT": [("1e23", "less than or equal to 3600"), ("1e-9", "or equal to 0.1")],
    "LESSONSYNC_WEBHOOK_MIN_BODY_RATE": [("1e-9", "greater than or equal to 1"), ("inf", "finite number")],
    "LESSONSYNC_WEBHOOK_MAX_CONNECTIONS": [("1000000000000", "less than or equal to 65536")],
    "LESSONSYNC_WEBHOOK_MAX_BODY_BYTES": [("1000000000000", "less than or equal to 268435456")],
    "LESSONSYNC_WEBHOOK_MAX_HEADER_BYTES": [("100000000000000000000000", "less than or equal to 1048576")],
    "LESSONSYNC_WEBHOOK_MAX_HEADER_COUNT": [("1000000000000", "less than or equal to 1000")],
}
WEBHOOK_CASES = [(name, value, problem) for name, values in WEBHOOK_BAD.items() for value, problem in values]


@pytest.mark.parametrize(("name", "value", "problem"), WEBHOOK_CASES)
def test_a_receiver_limit_out_of_range_is_named_with_its_problem(
    name: str, value: str, problem: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as failure:
        webhook_settings.load_webhook_settings(inbox_path=tmp_path / "inbox.sqlite3")
    message = str(failure.value)
    assert "\n" not in message and f"{name}: " in message and problem in message, message


def _limit_fields(model: type[BaseSettings]) -> list[str]:
    """The fields of `model` that set a number: an int, a float or a duration, maybe optional."""
    return [
        name
        for name, info in model.model_fields.items()
        if {int, float, timedelta} & ({info.annotation} | set(typing.get_args(info.annotation)))
    ]


def _switching_off(model: type[BaseSettings], name: str) -> list[str]:
    """Values that would switch a limit off or make it meaningless, in the field's own type."""
    kinds = {model.model_fields[name].annotation} | set(typing.get_args(model.model_fields[name].annotation))
    if timedelta in kinds:
        return ["P100000D", "-PT1S"]
    if float in kinds:
        return ["inf", "-inf", "nan", "1e308", "-1"]
    return [str(10**24), "-1"]


LIMIT_FIELDS = [("LESSONSYNC_", Settings, name) for name in _limit_fields(Settings)] + [
    ("LESSONSYNC_WEBHOOK_", WebhookSettings, name) for name in _limit_fields(WebhookSettings)
]


@pytest.mark.parametrize(
    ("prefix", "model", "field"), LIMIT_FIELDS, ids=[f"{p}{f.upper()}" for p, _, f in LIMIT_FIELDS]
)
def test_every_limit_setting_has_a_finite_range(
    prefix: str, model: type[BaseSettings], field: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A new number setting is covered when it is added: infinite, huge and negative values are refused."""
    monkeypatch.chdir(tmp_path)
    name = prefix + field.upper()
    for value in _switching_off(model, field):
        monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError) as failure:
            if model is Settings:
                load_settings()
            else:
                webhook_settings.load_webhook_settings(inbox_path=tmp_path / "inbox.sqlite3")
        message = str(failure.value)
        assert "\n" not in message and f"{name}: " in message, f"{name}={value}: {message}"


def test_a_receiver_with_limits_out_of_range_does_not_start(tmp_path: Path) -> None:
    """Not a receiver answering 408 to every delivery (a head due within a nanosecond), nor one without a cap."""
    env = _clean_env(
        tmp_path,
        LESSONSYNC_WEBHOOK_BEARER_TOKENS=SECRET,
        LESSONSYNC_WEBHOOK_HEADER_TIMEOUT="1e-9",
        LESSONSYNC_WEBHOOK_MAX_CONNECTIONS="1000000000000",
    )
    done = subprocess.run(
        [BIN / "lessonsync", "receive", "--port", "1"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("lessonsync receive: invalid settings: LESSONSYNC_WEBHOOK_HEADER_TIMEOUT: ")
    assert "LESSONSYNC_WEBHOOK_MAX_CONNECTIONS: " in lines[0] and SECRET not in lines[0]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["inbox", "replay", "1180591620717411303424"], "lessonsync inbox replay: argument SEQ: "),
        (["inbox", "discard", "0"], "lessonsync inbox discard: argument SEQ: "),
        (["receive", "--port", "70000"], "lessonsync receive: argument --port: "),  # the socket would take 70000 % 2^16
        (["demo", "--seed", "-1"], "lessonsync demo: argument --seed: "),
    ],
)
def test_a_numeric_argument_out_of_range_is_one_line_and_status_2(
    arguments: list[str], named: str, tmp_path: Path
) -> None:
    env = _clean_env(tmp_path, LESSONSYNC_WEBHOOK_BEARER_TOKENS=SECRET)
    data = tmp_path / "data"
    data.mkdir()
    resolve_dead_letter(open_inbox(data / "inbox.sqlite3"), 1, "discarded")  # a dead-letter table to look in
    done = subprocess.run(
        [BIN / "lessonsync", *arguments], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(named) and "is not a whole number from " in lines[0], lines[0]


def test_secrets_are_never_shown(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LESSONSYNC_BASE_URL", f"ftp://user:{SECRET}@platform.example")
    monkeypatch.setenv("LESSONSYNC_ALERT_WEBHOOK_URL", SECRET)
    monkeypatch.setenv("LESSONSYNC_PAGE_SIZE", "0")
    with pytest.raises(SettingsError) as failure:
        load_settings()
    assert SECRET not in str(failure.value) and "LESSONSYNC_PAGE_SIZE" in str(failure.value)


def test_sync_fails_at_once_on_a_bad_address(tmp_path: Path) -> None:
    started = time.monotonic()
    env = _clean_env(tmp_path, LESSONSYNC_BASE_URL="not a url", LESSONSYNC_RETRY_BUDGET="300")
    done = subprocess.run([BIN / "lessonsync", "sync"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and time.monotonic() - started < 30  # not 300 s of retrying
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("lessonsync sync: invalid settings: LESSONSYNC_BASE_URL: ")
    assert not (tmp_path / "data").exists()  # no work started


def test_the_code_location_fails_to_load_naming_the_setting(tmp_path: Path) -> None:
    env = _clean_env(tmp_path, LESSONSYNC_DUCKDB_MEMORY_LIMIT="lots")
    done = subprocess.run(
        [BIN / "dagster", "definitions", "validate", "-m", "pipeline.definitions"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "SettingsError: invalid settings: LESSONSYNC_DUCKDB_MEMORY_LIMIT: 'lots' is not a DuckDB memory size" in (
        output
    ), output[-3000:]
    assert SECRET not in output


def test_a_relative_data_directory_stays_where_it_was_when_the_working_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dagster-dbt changes the process's working directory around each dbt invocation (to the models directory):
    the files of a run's threads, the warehouse's DuckDB temp directory among them, stay in the data directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LESSONSYNC_DATA_DIR", raising=False)
    defaulted, given = load_settings(), load_settings(data_dir=Path("elsewhere"), duckdb_temp_directory=Path("spill"))
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path / "models")
    assert defaulted.data_dir == tmp_path / "data"
    assert defaulted.warehouse_path == tmp_path / "data" / "warehouse.duckdb"
    assert given.page_cache_dir == tmp_path / "elsewhere" / "cache" / "pages"
    assert given.duckdb_temp_directory == tmp_path / "spill"
    temp = Warehouse.from_settings(defaulted).connection_settings.duckdb_config(defaulted.warehouse_path)
    assert temp["temp_directory"] == str(tmp_path / "data" / "warehouse.duckdb.tmp")
