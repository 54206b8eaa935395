"""The certificate inbox sensor (build_sensor_context) and the certificates asset (real Dagster
execution with dagster.materialize against temp DuckDB and SQLite files)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import orjson
import pytest
from dagster import AssetKey, RunRequest, SkipReason, build_sensor_context, materialize
from webhook_helpers import FUTURE, PAST, certificate

from pipeline.definitions import defs
from pipeline.defs.certificates.assets import certificates
from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.certificates.sensors import build_certificate_inbox_sensor
from pipeline.defs.resources import WarehouseResource
from pipeline.settings import Settings, load_settings
from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox

certificate_inbox_sensor = defs.resolve_sensor_def("certificate_inbox_sensor")  # the one the code location ships


def deliver(inbox: Inbox, *payloads: dict[str, object]) -> None:
    inbox.append([to_delivery(orjson.dumps(p), datetime.now(UTC), "dagster-test") for p in payloads])


def tick(inbox: Inbox, cursor: str | None) -> tuple[RunRequest | SkipReason, str | None]:
    context = build_sensor_context(cursor=cursor, resources={"inbox": InboxResource(path=str(inbox.path))})
    result = certificate_inbox_sensor(context)
    assert isinstance(result, RunRequest | SkipReason)
    return result, context.cursor


def test_sensor_requests_a_run_only_when_new_events_exist(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    result, cursor = tick(inbox, None)
    assert isinstance(result, SkipReason) and "no inbox" in (result.skip_message or "")

    deliver(inbox, certificate("c1"), certificate("c2"), certificate("c3"))
    result, cursor = tick(inbox, cursor)
    assert isinstance(result, RunRequest) and result.run_key and result.run_key.endswith("-3")
    assert certificate_inbox_sensor.job_name == "load_certificates"  # its runs carry the job's writer tag
    assert json.loads(cursor or "")["sequence"] == 3

    result, same_cursor = tick(inbox, cursor)
    assert isinstance(result, SkipReason) and same_cursor == cursor

    deliver(inbox, certificate("c4"))
    result, cursor = tick(inbox, cursor)
    assert isinstance(result, RunRequest) and result.run_key and result.run_key.endswith("-4")


def test_sensor_notices_a_recreated_inbox_with_lower_sequences(tmp_path: Path) -> None:
    old = Inbox(tmp_path / "old.sqlite3")
    deliver(old, *(certificate(f"c{n}") for n in range(5)))
    first, cursor = tick(old, None)
    new = Inbox(tmp_path / "new.sqlite3")
    deliver(new, certificate("fresh"))
    second, _ = tick(new, cursor)
    assert isinstance(first, RunRequest) and isinstance(second, RunRequest)
    assert first.run_key != second.run_key


def test_sensor_accepts_a_bare_sequence_cursor(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    deliver(inbox, certificate("c1"), certificate("c2"))
    assert isinstance(tick(inbox, "2")[0], SkipReason)
    assert isinstance(tick(inbox, "1")[0], RunRequest)


def test_sensor_reads_only_the_inbox_never_the_warehouse() -> None:
    assert certificate_inbox_sensor.required_resource_keys == {"inbox"}


def test_sensor_interval_comes_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_certificate_inbox_sensor(Settings(_env_file=None).orchestration).minimum_interval_seconds == 30
    monkeypatch.setenv("LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL", "5")
    assert build_certificate_inbox_sensor(load_settings().orchestration).minimum_interval_seconds == 5
    monkeypatch.setenv("LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL", "soon")
    with pytest.raises(ValueError, match="(?i)certificate_sensor_interval"):
        load_settings()


def run_asset(tmp_path: Path, inbox: Inbox) -> dict[AssetKey, dict[str, object]]:
    result = materialize(
        [certificates],
        resources={
            "warehouse": WarehouseResource(data_dir=str(tmp_path)),
            "inbox": InboxResource(path=str(inbox.path)),
        },
    )
    assert result.success
    return {
        event.asset_key: {k: v.value for k, v in event.materialization.metadata.items()}  # type: ignore[union-attr]
        for event in result.get_asset_materialization_events()
    }


def snapshot(tmp_path: Path) -> dict[str, list[tuple[object, ...]]]:
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as conn:
        tables = ("certificate_events", "certificates")
        contents = {t: conn.execute(f"SELECT * FROM lms.{t} ORDER BY ALL").fetchall() for t in tables}
        contents["positions"] = conn.execute("SELECT stream, position FROM lms._sync_state ORDER BY ALL").fetchall()
        return contents


def test_asset_loads_the_inbox_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    deliver(inbox, certificate("c1", FUTURE), certificate("c1", PAST), certificate("c2", FUTURE))
    first = run_asset(tmp_path, inbox)
    events_key, state_key = AssetKey(["lms", "certificate_events"]), AssetKey(["lms", "certificates"])
    assert set(first) == {events_key, state_key}
    assert {
        k: first[state_key][k]
        for k in ("events_loaded", "completed", "expired", "duplicates_skipped", "hwm_before", "hwm_after")
    } == {
        "events_loaded": 3,
        "completed": 2,
        "expired": 1,
        "duplicates_skipped": 0,
        "hwm_before": 0,
        "hwm_after": 3,
    }
    assert (first[events_key]["dagster/row_count"], first[state_key]["dagster/row_count"]) == (3, 2)
    tables = snapshot(tmp_path)
    assert tables["positions"] == [(f"certificate_inbox_{inbox.inbox_id()}", 3)]

    second = run_asset(tmp_path, inbox)
    assert (second[state_key]["events_loaded"], second[state_key]["hwm_before"]) == (0, 3)
    assert snapshot(tmp_path) == tables


def test_asset_definition_is_documented_for_the_ui() -> None:
    graph = defs.resolve_asset_graph()
    for spec in certificates.specs:
        assert spec.group_name == "certificates" and spec.kinds == {"duckdb"} and graph.get(spec.key).owners
        assert spec.description and "dagster/column_schema" in spec.metadata
    assert certificates.op.description and "\n" not in certificates.op.description.strip()


def test_the_sensors_job_loads_and_rebuilds_the_certificate_marts_before_any_sync(tmp_path: Path) -> None:
    """Deliveries can come before the first sync: the job must not build marts whose other inputs are missing."""
    from dagster import DagsterInstance

    from pipeline.settings import load_settings
    from pipeline.sync import run_job

    deliver(Inbox(tmp_path / "inbox.sqlite3"), certificate("c1", FUTURE), certificate("c2", FUTURE))
    report = run_job("load_certificates", load_settings(data_dir=tmp_path), instance=DagsterInstance.ephemeral())
    assert report.success, report.error
    assert {"lms/certificates", "analytics/certificates", "analytics/certificates_by_badge"} <= set(
        report.materializations
    )
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM analytics.certificates").fetchone() == (2,)


def test_the_sensor_counts_the_new_events_not_the_sequence_numbers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    for n in range(4):  # each event delivered twice: a redelivery keeps its row and spends a sequence number
        deliver(inbox, certificate(f"c{n}"))
        deliver(inbox, certificate(f"c{n}"))
    assert inbox.count_events() == 4 and inbox.max_sequence() > 4
    result, _ = tick(inbox, None)
    assert isinstance(result, RunRequest)
    said = [line for line in capfd.readouterr().err.splitlines() if "certificate inbox:" in line]  # its context.log
    assert said and "certificate inbox: 4 new event(s) up to sequence" in said[0], said
