"""`dagster dev` (webserver + daemon + code server) as a user runs it, for end-to-end tests: a temp DAGSTER_HOME
with the shipped instance config, a free port, the repo's workspace.yaml, and the whole process group killed at
the end. Queried through the webserver's GraphQL API, as the UI does; the instance's own storage is read for
what the UI does not show (pool slots, a run worker's pid)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterInstance

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = REPO / "pipeline" / "instance" / "dagster.yaml"
LOCATION = {"repositoryLocationName": "lessonsync", "repositoryName": "__repository__"}
# `dagster dev -w workspace.yaml` (what users of `dagster dev` run; `make dev` runs `dg dev`) still works in 1.13: its
# "use dg dev" notice is noise here.
QUIET = "ignore:Function `dev_command` is superseded"
SCHEDULE = "nightly_sync_schedule"
SCHEDULED = [{"key": "dagster/schedule_name", "value": SCHEDULE}]  # a runs filter: the schedule's runs
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}
IN_PROGRESS = ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]

RUNS_QUERY = """query Runs($filter: RunsFilter) { runsOrError(filter: $filter) { __typename
  ... on Runs { results { runId jobName status creationTime tags { key value } } }
  ... on PythonError { message } } }"""
LAUNCH_RUN = """mutation Launch($executionParams: ExecutionParams!) { launchRun(executionParams: $executionParams) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }"""
SCHEDULES = """query { repositoryOrError(repositorySelector: {repositoryLocationName: "lessonsync",
  repositoryName: "__repository__"}) { __typename ... on Repository { schedules { id name } } } }"""
STOP_SCHEDULE = """mutation Stop($id: String) { stopRunningSchedule(id: $id) { __typename
  ... on PythonError { message } } }"""
TERMINATE = """mutation Terminate($runIds: [String!]!) { terminateRuns(runIds: $runIds) { __typename } }"""
ASSET_HEALTH = """query Asset($path: [String!]!) { assetNodeOrError(assetKey: {path: $path}) { __typename
  ... on AssetNode { isPartitioned partitionStats { numMaterialized numPartitions }
                     assetMaterializations(limit: 1) { runId } } } }"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class DagsterDev:
    process: subprocess.Popen[bytes]
    port: int
    home: Path
    log: Path

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.loads(response.read())
        assert "errors" not in answer, answer["errors"]
        return answer["data"]

    def runs(self, **filter_: Any) -> list[dict[str, Any]]:
        """Runs newest first, filtered as the Runs page does (e.g. tags=[{"key": ..., "value": ...}])."""
        data = self.graphql(RUNS_QUERY, {"filter": filter_})["runsOrError"]
        assert data["__typename"] == "Runs", data
        for run in data["results"]:
            run["tags"] = {t["key"]: t["value"] for t in run["tags"]}
        return data["results"]

    def wait_for(self, run_id: str, what: str, timeout: float = 300) -> dict[str, Any]:
        """Run `run_id` once finished."""
        return self.wait_for_run(lambda runs: runs[0] if runs else None, what, timeout, runIds=[run_id])

    def launch(self, job: str, run_config: dict[str, Any]) -> str:
        """Launch `job` with `run_config` the way the Launchpad's Launch button does; the run id."""
        params = {
            "selector": {**LOCATION, "jobName": job},
            "runConfigData": run_config,
            "mode": "default",
            "executionMetadata": {"tags": []},
        }
        result = self.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
        assert result["__typename"] == "LaunchRunSuccess", result
        return result["run"]["runId"]

    def wait_for_run(
        self,
        pick: Callable[[list[dict[str, Any]]], dict[str, Any] | None],
        what: str,
        timeout: float = 300,
        finished: bool = True,
        **filter_: Any,
    ) -> dict[str, Any]:
        """Poll until `pick(runs)` returns a run (by default: until that run has finished); that run."""
        deadline = time.monotonic() + timeout
        while True:
            run = pick(self.runs(**filter_))
            if run is not None and (run["status"] in FINISHED or not finished):
                return run
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f} s waiting for {what}; last seen: {run}\n" + self.log_tail()
                )
            time.sleep(2)

    def stop_schedule(self, name: str) -> None:
        """Turn schedule `name` off, as the UI's toggle does."""
        schedules = self.graphql(SCHEDULES)["repositoryOrError"]["schedules"]
        (schedule_id,) = [s["id"] for s in schedules if s["name"] == name]
        stopped = self.graphql(STOP_SCHEDULE, {"id": schedule_id})["stopRunningSchedule"]
        assert stopped["__typename"] == "ScheduleStateResult", stopped

    def drain(self, timeout: float = 300) -> None:
        """Terminate queued runs (never started, nothing to undo), wait for the running ones to finish: the
        warehouse file is then free for the test to read."""
        deadline = time.monotonic() + timeout
        while running := self.runs(statuses=IN_PROGRESS):
            if queued := [r["runId"] for r in running if r["status"] == "QUEUED"]:
                self.graphql(TERMINATE, {"runIds": queued})
            if time.monotonic() > deadline:
                raise AssertionError(f"runs still in progress after {timeout:.0f} s: {running}\n" + self.log_tail())
            time.sleep(2)

    def asset_health(self, *path: str) -> dict[str, Any]:
        """What the asset page shows about materializations: partitioned or not, partition counts, last run."""
        node = self.graphql(ASSET_HEALTH, {"path": list(path)})["assetNodeOrError"]
        assert node["__typename"] == "AssetNode", node
        return node

    def instance(self) -> DagsterInstance:
        """The same instance the daemon and runs use (SQLite storage under the home), from this process."""
        return DagsterInstance.from_config(str(self.home))

    def unsuccessful_runs(self) -> list[str]:
        """Every run not SUCCESS, with its job and its failure messages, for assertion messages."""
        instance = self.instance()
        found = []
        for run in self.runs():
            if run["status"] != "SUCCESS":
                errors = [
                    e.message
                    for e in instance.all_logs(run["runId"])
                    if e.dagster_event is not None and e.dagster_event.is_failure
                ]
                found.append(f"{run['runId']} {run['jobName']} {run['status']}: {' | '.join(errors)[-1500:]}")
        return found

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"dagster dev exited with {self.process.returncode}\n" + self.log_tail())

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def created_after(moment: float) -> Callable[[list[dict[str, Any]]], dict[str, Any] | None]:
    """For `wait_for_run`: the oldest run created after `moment` (epoch seconds; runs come newest first)."""

    def pick(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
        return next((r for r in reversed(runs) if r["creationTime"] > moment), None)

    return pick


def run_worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The pid of a launched run's worker process, from its "Started process for run" engine event."""
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = entry.dagster_event.event_specific_data.metadata if entry.dagster_event else {}
        if "pid" in metadata and "Started process for run" in (entry.message or ""):
            return int(metadata["pid"].value)
    return None


def pool_holders(instance: DagsterInstance, pool: str = "warehouse") -> set[str]:
    """Run ids holding a slot of `pool`."""
    return {slot.run_id for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots}


@contextmanager
def dagster_dev(home: Path, env: dict[str, str], *, startup_timeout: float = 240) -> Iterator[DagsterDev]:
    """`dagster dev -w workspace.yaml` from the repo on a free port with DAGSTER_HOME=`home` (the shipped
    dagster.yaml copied in) and `env` added to this process's environment. Its own process group, killed whole
    on exit (webserver, daemon, code servers, run workers)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    port, log = free_port(), home / "dagster-dev.log"
    command = [
        str(Path(sys.executable).with_name("dagster")),
        "dev",
        "-w",
        "workspace.yaml",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    full_env = {**os.environ, **env, "DAGSTER_HOME": str(home), "PYTHONWARNINGS": QUIET}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    dev = DagsterDev(process, port, home, log)
    try:
        _wait_until_serving(dev, startup_timeout)
        yield dev
    finally:
        _kill_group(process)


def _wait_until_serving(dev: DagsterDev, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{dev.port}/server_info", timeout=5)
            return
        except OSError:
            dev.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"dagster dev did not serve within {timeout:.0f} s\n" + dev.log_tail()) from None
            time.sleep(1)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the whole group (dagster dev stops its services), SIGKILL to whatever is left after 20 s."""
    group = process.pid  # start_new_session: the group id is the leader's pid
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=20)
    deadline = time.monotonic() + 20
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.5)
    with suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    process.wait(timeout=30)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False
