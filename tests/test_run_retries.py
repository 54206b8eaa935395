"""Run retries only for what can pass on retry: a real run with its retry hook on the shipped instance config;
the daemon's decision (Dagster's `dagster/will_retry` tag, set when the run fails) is read back."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, execute_job, in_process_executor, job, op, reconstructable

from pipeline.defs.operations.runs.retry_policy import IN_PROCESS_TAG, retry_policy_hook
from pipeline.instance import SHIPPED_CONFIG
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


@pytest.fixture
def instance(tmp_path: Path):
    (tmp_path / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with DagsterInstance.from_config(str(tmp_path)) as shipped:
        yield shipped


@pytest.mark.parametrize(
    ("make_job", "retried"),
    [
        (outage_job, True),
        (locked_job, True),
        (memory_job, False),
        (not_found_job, False),
        (contract_job, False),
        (outage_and_memory_job, False),
    ],
)
def test_only_transient_failures_are_retried(instance: DagsterInstance, make_job, retried: bool) -> None:
    with execute_job(reconstructable(make_job), instance=instance) as result:
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
    assert run is not None
    assert run.tags.get("dagster/will_retry") == str(retried).lower()
    if retried:
        assert run.tags["dagster/max_retries"] == "2"


def test_in_process_runs_are_never_retried(instance: DagsterInstance) -> None:
    with execute_job(reconstructable(outage_job), instance=instance, tags={IN_PROCESS_TAG: "true"}) as result:
        assert not result.success
        run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags.get("dagster/will_retry") == "false"
