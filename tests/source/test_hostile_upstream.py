"""A hostile platform (hostile_upstream.py: a real server on loopback in front of a tiny simulator): each fault
ends the fetch cleanly within its bound (the retry budget + 10 % for what is retried, at once for what is not),
with an error naming the endpoint; or, for what is harmless, succeeds with the platform's exact records. The CLI
cases run `lessonsync sync` for real: a drip-feeding platform fails it within the budget, SIGTERM ends it within
seconds with its run marked failed, and a fault mid-sync commits nothing half (the next sync is exact)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from dagster import DagsterInstance, DagsterRunStatus
from hostile_upstream import Hostile, hostile_upstream
from stack_helpers import RAW, assert_warehouse_equals_platform, failed_run_logs

from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from pipeline.source.errors import PlatformRequestError, PlatformResponseError, PlatformUnavailableError
from pipeline.stack import local_stack
from simulator import SimulatorConfig, SimulatorHandle, start_simulator

BUDGET = 2.0  # LESSONSYNC_RETRY_BUDGET of the client cases
LESSONSYNC = str(Path(sys.executable).with_name("lessonsync"))

# fault -> (path it is served on, stream read, expected error, text the error must contain; None: success)
CASES: dict[str, tuple[str, str, type[Exception] | None, str]] = {
    "drip": ("/v1/categories", "categories", PlatformUnavailableError, "deadline"),
    "slow_headers": ("/v1/categories", "categories", PlatformUnavailableError, "deadline"),
    "redirect_away": ("/v1/lessons", "lessons", PlatformRequestError, "redirects are not followed"),
    "redirect_loop": ("/v1/categories", "categories", PlatformRequestError, "last status 302"),
    "truncated": ("/v1/categories", "categories", PlatformUnavailableError, "body incomplete"),
    "huge": ("/v1/categories", "categories", PlatformRequestError, "LESSONSYNC_MAX_RESPONSE_BYTES"),
    "invalid_json": ("/v1/categories", "categories", PlatformUnavailableError, "invalid JSON"),
    "wrong_type": ("/v1/lessons", "lessons", None, ""),
    "html_200": ("/v1/categories", "categories", PlatformUnavailableError, "invalid JSON"),
    "storm_503": ("/v1/groups", "groups", PlatformUnavailableError, "last status 503"),
    "absurd_429": ("/v1/categories", "categories", PlatformUnavailableError, "last status 429"),
    "reset": ("/v1/lesson-session", "lesson_sessions", PlatformUnavailableError, "/v1/lesson-session"),
    "endless": ("/v1/lessons", "lessons", PlatformResponseError, "ignores pageNumber"),
    "header_flood": ("/v1/categories", "categories", PlatformUnavailableError, "Too many headers"),
    "not_found": ("/v1/groups", "groups", PlatformRequestError, "last status 404"),
    "token_drip": ("/v1/token", "categories", PlatformUnavailableError, "POST /v1/token"),
}
NOT_RETRIED = {"redirect_away", "redirect_loop", "huge", "not_found"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as handle:
        yield handle


@pytest.fixture(scope="module")
def hostile(sim: SimulatorHandle) -> Iterator[Hostile]:
    with hostile_upstream(sim.base_url) as server:
        yield server


def _settings(base_url: str) -> Settings:
    return Settings(
        base_url=base_url,
        data_dir="unused",
        page_size=5,  # several pages per listing, full ones for the endless case
        request_timeout=1.0,
        retry_budget=BUDGET,
        retry_max_wait=0.5,
        max_response_bytes=8 << 20,
    )


def _records(base_url: str, stream: str) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    with PlatformClient(_settings(base_url)) as client:
        for batch in client.iter_stream(stream):
            rows.setdefault(batch.table.name, []).extend(batch.records.to_pylist())
    return rows


@pytest.mark.parametrize("fault", sorted(CASES))
def test_a_hostile_platform_ends_the_fetch_cleanly_within_its_bound(
    fault: str, sim: SimulatorHandle, hostile: Hostile
) -> None:
    path, stream, error, text = CASES[fault]
    hostile.faults.clear()
    hostile.hits.clear()
    hostile.first_hit.clear()
    hostile.faults[path] = fault.removeprefix("token_")
    if error is None:
        assert _records(hostile.base_url, stream) == _records(sim.base_url, stream)
        return
    with pytest.raises(error) as failure:
        _records(hostile.base_url, stream)
    # the budget runs from the fault's first request: the client's start and the token exchange before it are not
    # the budget's, and take longer on a loaded machine
    took = time.monotonic() - hostile.first_hit[path]
    message = str(failure.value)
    assert text in message and path in message, message
    assert took <= BUDGET * 1.1 + 0.5, f"{fault}: {took:.2f} s after its first request"
    if fault in NOT_RETRIED:
        assert hostile.hits[path] == 1, "a failure that repeats itself is not retried"
    assert "lessonsync-demo-secret" not in message


def _sync(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LESSONSYNC, "sync", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _cli_env(stack_env: dict[str, str], base_url: str, data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONSYNC_") and k != "DAGSTER_HOME"}
    env.update(stack_env)
    env.update({"LESSONSYNC_BASE_URL": base_url, "LESSONSYNC_DATA_DIR": str(data_dir)})
    env.update({f"LESSONSYNC_{name.upper()}": value for name, value in settings.items()})
    return env


def _categories(data_dir: Path) -> list[tuple]:
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute("SELECT * FROM lms.categories ORDER BY ALL").fetchall()


def test_retries_that_end_on_another_failure_name_the_earlier_ones_too(sim: SimulatorHandle, hostile: Hostile) -> None:
    """A request whose attempts failed one way and whose last attempt failed another (a header flood, then a stall,
    as on a loaded machine) is reported with both: its last failure, then the earlier ones and how often."""
    hostile.faults.clear()
    hostile.hits.clear()
    hostile.faults["/v1/categories"] = "header_flood*2,slow_headers"
    with pytest.raises(PlatformUnavailableError) as failure:
        _records(hostile.base_url, "categories")
    message = str(failure.value)
    assert hostile.hits["/v1/categories"] > 2, message
    last, _, earlier = message.partition("; before it: ")
    assert "deadline" in last and "Too many headers" not in last, message
    assert "Too many headers" in earlier and "(2 attempts)" in earlier, message


@pytest.mark.slow
def test_a_drip_feeding_platform_fails_the_sync_within_the_budget_and_sigterm_ends_it_within_seconds(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    with local_stack(data_dir, scale="tiny") as stack, hostile_upstream(stack.sim.base_url) as server:
        select = ("--select", "key:lms/categories")
        env = _cli_env(stack.env, server.base_url, data_dir, request_timeout="5", retry_budget="15")
        first = _sync(env, *select)
        assert first.wait(180) == 0, first.communicate()[0][-3000:]
        before = _categories(data_dir)
        assert before

        # the drip: LESSONSYNC_REQUEST_TIMEOUT=5 is never reached (a byte a second), the budget of 15 s is
        server.faults["/v1/categories"] = "drip"
        dripped = _sync(env, *select)
        output = dripped.communicate(timeout=180)[0]
        first_hit_at = server.first_hit["/v1/categories"] + time.time() - time.monotonic()  # on the wall clock
        last = output.strip().splitlines()[-1]
        assert dripped.returncode == 1, output[-3000:]
        assert last.startswith("sync FAILED: ") and "GET /v1/categories" in last and "deadline" in last, last
        took = failed_run_logs(data_dir, last)[1] - first_hit_at
        assert took <= 15 * 1.1, f"failed {took:.1f} s after the first request, budget 15 s"
        assert _categories(data_dir) == before  # nothing committed
        print(f"drip: sync failed {took:.1f} s after its first request to /v1/categories (budget 15 s)")

        # SIGTERM while the sync waits on the drip (budget raised so that only the signal can end it)
        server.first_hit.clear()
        env["LESSONSYNC_RETRY_BUDGET"] = "300"
        stopped = _sync(env, *select)
        while "/v1/categories" not in server.first_hit:
            assert stopped.poll() is None, stopped.communicate()[0][-3000:]
            time.sleep(0.1)
        time.sleep(1.0)
        signalled = time.monotonic()
        stopped.send_signal(signal.SIGTERM)
        output = stopped.communicate(timeout=60)[0]
        to_exit = time.monotonic() - signalled
        print(f"SIGTERM: the sync exited {to_exit:.1f} s after the signal")
        assert to_exit <= 6.0, output[-3000:]
        assert stopped.returncode != 0
        assert output.strip().splitlines()[-1].startswith("sync FAILED: stopped by SIGTERM"), output[-3000:]
        run_id = re.findall(r"\(run ([0-9a-f-]+)\)", output)[-1]
        with DagsterInstance.from_config(str(data_dir / "dagster_home")) as instance:
            run = instance.get_run_by_id(run_id)
            assert run is not None and run.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
        assert _categories(data_dir) == before


@pytest.mark.slow
def test_a_fault_mid_sync_commits_nothing_half_and_the_next_sync_is_exact(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=6)
        with hostile_upstream(stack.sim.base_url) as server:
            stack.env.update({"LESSONSYNC_BASE_URL": server.base_url, "LESSONSYNC_RETRY_BUDGET": "2"})
            server.faults["/v1/groups/"] = "truncated"  # the users of each group: the groups' substream
            with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
                users_before = conn.execute("SELECT * FROM lms.users ORDER BY ALL").fetchall()
            report = stack.sync(select=RAW)
            assert not report.success and "/v1/groups/" in (report.error or ""), report.error
            with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
                assert conn.execute("SELECT * FROM lms.users ORDER BY ALL").fetchall() == users_before
            server.faults.clear()
            assert stack.sync(select=RAW).success
        assert_warehouse_equals_platform(stack)
