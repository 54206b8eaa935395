"""Run retries only for what can pass on retry: a real run with its retry hook on the shipped instance config;
the daemon's decision (Dagster's `dagster/will_retry` tag, set when the run fails) is read back. A run that failed
because the platform was down is launched again by platform_retry_sensor after a back-off, not by the daemon at once:
the real nightly_sync against a port nothing listens on, then the sensor evaluated as the daemon would."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    RunRequest,
    SkipReason,
    build_sensor_context,
    execute_job,
    in_process_executor,
    job,
    op,
    reconstructable,
)

from pipeline.defs.code_location import build_definitions
from pipeline.defs.operations.runs.retry_policy import (
    AFTER_BACKOFF,
    AT_ONCE,
    IN_PROCESS_TAG,
    NEVER,
    REQUESTED,
    RETRY_NUMBER_TAG,
    RETRY_OF_TAG,
    RETRY_TAG,
    retry_decision,
    retry_policy_hook,
)
from pipeline.defs.operations.runs.retry_sensor import backoff_seconds
from pipeline.instance import SHIPPED_CONFIG
from pipeline.settings import load_settings
from pipeline.source.errors import PlatformRequestError, PlatformUnavailableError
from pipeline.warehouse import WarehouseLockedError

FAILURES = {
    "outage": lambda: PlatformUnavailableError("GET", "/v1/groups", {}, 503, 40, "status 503", retried_for=300),
    "locked": lambda: WarehouseLockedError(Path("warehouse.duckdb"), "PID 123 (duckdb)"),
    "memory": lambda: MemoryError("could not allocate block"),
    "not_found": lambda: PlatformRequestError("GET", "/v1/groups", {}, 404, 1, "no such thing"),
    "contract": lambda: ValueError("a page that is not a JSON array"),
}


def _failing_job(first: str, second: str | None = None):
    """A job of one or two independent steps failing with FAILURES[first] (and FAILURES[second])."""

    @op(name="first")
    def fail_first() -> None:
        raise FAILURES[first]()

    @op(name="second")
    def fail_second() -> None:
        if second is not None:
            raise FAILURES[second]()

    @job(name=f"fails_{first}_{second}", hooks={retry_policy_hook}, executor_def=in_process_executor)
    def failing() -> None:
        fail_first()
        fail_second()

    return failing


def outage_job():
    return _failing_job("outage")


def locked_job():
    return _failing_job("locked")


def memory_job():
    return _failing_job("memory")


def not_found_job():
    return _failing_job("not_found")


def contract_job():
    return _failing_job("contract")


def outage_and_memory_job():
    return _failing_job("outage", "memory")


def outage_and_locked_job():
    return _failing_job("outage", "locked")


@pytest.fixture
def instance(tmp_path: Path):
    (tmp_path / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with DagsterInstance.from_config(str(tmp_path)) as shipped:
        yield shipped


@pytest.mark.parametrize(
    ("make_job", "decision"),
    [
        (outage_job, AFTER_BACKOFF),
        (locked_job, AT_ONCE),
        (memory_job, NEVER),
        (not_found_job, NEVER),
        (contract_job, NEVER),
        (outage_and_memory_job, NEVER),
        (outage_and_locked_job, AFTER_BACKOFF),
    ],
)
def test_only_transient_failures_are_retried_and_a_platform_outage_after_a_backoff(
    instance: DagsterInstance, make_job, decision: str
) -> None:
    with execute_job(reconstructable(make_job), instance=instance) as result:
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags[RETRY_TAG] == decision
    # Dagster's daemon re-launches at once only what AT_ONCE allows; a platform outage is retry_sensor.py's
    assert run.tags.get("dagster/will_retry") == str(decision == AT_ONCE).lower()
    assert run.tags["dagster/max_retries"] == ("2" if decision == AT_ONCE else "0")


def test_a_run_whose_backoff_retries_are_used_up_is_not_retried_again() -> None:
    outage = FAILURES["outage"]()
    assert retry_decision(outage, {}) == AFTER_BACKOFF
    assert retry_decision(outage, {RETRY_NUMBER_TAG: "1"}) == AFTER_BACKOFF
    assert retry_decision(outage, {RETRY_NUMBER_TAG: "2"}) == NEVER


def test_in_process_runs_are_never_retried(instance: DagsterInstance) -> None:
    with execute_job(reconstructable(outage_job), instance=instance, tags={IN_PROCESS_TAG: "true"}) as result:
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags.get("dagster/will_retry") == "false"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_nightly_run_failed_on_a_platform_outage_is_launched_again_after_a_backoff(
    instance: DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 2.0
    for name, value in {
        "BASE_URL": f"http://127.0.0.1:{_closed_port()}",
        "RETRY_BUDGET": str(budget),  # the run's (its resources read the settings) and the sensor's back-off
        "RETRY_MAX_WAIT": "0.5",
        "DATA_DIR": str(tmp_path),
    }.items():
        monkeypatch.setenv(f"LESSONSYNC_{name}", value)
    defs = build_definitions(load_settings())
    nightly = defs.resolve_job_def("nightly_sync")
    retry_sensor = defs.resolve_sensor_def("platform_retry_sensor")

    def evaluate() -> object:
        return retry_sensor(build_sensor_context(instance=instance, definitions=defs))

    categories = [AssetKey(["lms", "categories"])]  # a run of part of the job: the retry asks for the same part
    failed = nightly.execute_in_process(instance=instance, asset_selection=categories, raise_on_error=False)
    assert not failed.success
    run = instance.get_run_by_id(failed.run_id)
    assert run is not None and run.tags[RETRY_TAG] == AFTER_BACKOFF and run.tags["dagster/will_retry"] == "false"

    waiting = evaluate()  # the run has just ended: its retry waits for one retry budget
    assert isinstance(waiting, SkipReason) and f"{failed.run_id} (retry 1 in " in str(waiting.skip_message)
    record = instance.get_run_record_by_id(failed.run_id)
    assert record is not None and record.end_time is not None
    time.sleep(max(0.0, record.end_time + budget - time.time()) + 0.1)
    requests = evaluate()
    assert isinstance(requests, list) and len(requests) == 1
    again = requests[0]
    assert isinstance(again, RunRequest) and again.job_name == "nightly_sync" and again.asset_selection == categories
    assert again.run_key == f"retry-of-{failed.run_id}"
    assert again.tags[RETRY_NUMBER_TAG] == "1" and again.tags[RETRY_OF_TAG] == failed.run_id
    assert not any(key.startswith("dagster/") for key in again.tags) and RETRY_TAG not in again.tags
    assert instance.get_run_by_id(failed.run_id).tags[RETRY_TAG] == REQUESTED  # type: ignore[union-attr]
    assert isinstance(evaluate(), SkipReason)  # asked for once

    # the retry, as the daemon would launch it, meets the outage again: its own retry waits twice as long
    retried = nightly.execute_in_process(
        instance=instance,
        run_config=again.run_config,
        tags=again.tags,
        asset_selection=again.asset_selection,
        raise_on_error=False,
    )
    assert not retried.success
    second = evaluate()
    assert isinstance(second, SkipReason) and f"{retried.run_id} (retry 2 in " in str(second.skip_message)
    assert backoff_seconds(budget, 2) == 2 * budget
