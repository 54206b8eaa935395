"""dead_run_sensor on a real (temp) Dagster instance: a STARTED run whose process is gone is failed and its pool
slot freed; a live run, a run recorded on another host, and a retry still carrying its dead parent's process tags
(Dagster copies a run's tags to its retries) are left alone."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psutil
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, build_sensor_context

from pipeline.defs.operations.runs.identity import RunProcess, current_process
from pipeline.defs.operations.runs.sensor import dead_run_sensor
from pipeline.instance import SHIPPED_CONFIG


def _started_run(instance: DagsterInstance, process: RunProcess, tags_of_run: str | None = None) -> DagsterRun:
    run_id = str(uuid.uuid4())
    run = DagsterRun(
        job_name="nightly_sync",
        run_id=run_id,
        status=DagsterRunStatus.STARTED,
        tags=process.tags(tags_of_run or run_id),
    )
    return instance.add_run(run)


def _dead_process() -> RunProcess:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = psutil.Process(child.pid).create_time()
    child.kill()
    child.wait()
    return RunProcess(current_process().host, child.pid, started)


def test_dead_runs_of_this_host_are_failed_and_free_their_slot_others_are_untouched(tmp_path):
    (tmp_path / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        dead = _started_run(instance, _dead_process())
        alive = _started_run(instance, current_process())
        elsewhere = _started_run(instance, RunProcess("another-host.example", 1, 0.0))
        retry = _started_run(instance, _dead_process(), tags_of_run=dead.run_id)  # parent's tags, copied
        storage = instance.event_log_storage
        storage.set_concurrency_slots("warehouse", 1)
        assert storage.claim_concurrency_slot("warehouse", dead.run_id, "lms__answers").is_claimed

        result = dead_run_sensor(build_sensor_context(instance=instance))

        assert dead.run_id in result.skip_message and "dead_run_sensor" in result.skip_message
        assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(elsewhere.run_id).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(retry.run_id).status == DagsterRunStatus.STARTED
        assert dead.run_id not in storage.get_concurrency_run_ids()

        again = dead_run_sensor(build_sensor_context(instance=instance))
        assert again.skip_message == "no dead run on this host"
