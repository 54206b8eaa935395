"""What a run carries besides its work, on the real code location and a real (temp) Dagster instance: the tags an
operator filters on and no more (full refreshes tagged as such, the executing process in one tag, old runs' four
still read), no hook event on a successful step, and only its own resources offered to `lake_maintenance`."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, execute_job, reconstructable

from pipeline.defs.code_location import build_definitions
from pipeline.defs.operations.runs.identity import RunProcess, current_process, recorded_process
from pipeline.defs.policy import WINDOW_TAG
from pipeline.instance import SHIPPED_CONFIG
from pipeline.settings import load_settings


def _defs(tmp_path: Path):
    return build_definitions(load_settings(data_dir=tmp_path))


def test_a_full_refresh_is_tagged_full_refresh_and_jobs_carry_a_few_tags(tmp_path: Path) -> None:
    defs = _defs(tmp_path)
    windows = {name: defs.resolve_job_def(name).run_tags.get(WINDOW_TAG) for name in ("nightly_sync", "full_refresh")}
    assert windows == {"nightly_sync": "cursor", "full_refresh": "full-refresh"}
    for name in ("nightly_sync", "full_refresh", "backfill_progress", "load_certificates", "lake_maintenance"):
        own = [key for key in defs.resolve_job_def(name).run_tags if key.startswith("lessonsync/")]
        assert len(own) <= 2, (name, own)


def test_the_process_of_a_run_is_one_tag_and_old_runs_four_tags_are_still_read() -> None:
    process = current_process()
    tags = process.tags("0123456789abcdef")
    assert list(tags) == ["lessonsync/process"]
    assert recorded_process("0123456789abcdef", tags) == RunProcess(process.host, process.pid, round(process.started))
    assert recorded_process("fedcba9876543210", tags) is None  # a retry's copy of its parent's tag
    old = {
        "lessonsync/host": "h",
        "lessonsync/pid": "12",
        "lessonsync/pid-started": "1700000000.25",
        "lessonsync/pid-run": "r1",
    }
    assert recorded_process("r1", old) == RunProcess("h", 12, 1700000000.25)


def test_lake_maintenance_offers_only_the_resource_its_op_uses(tmp_path: Path) -> None:
    job = _defs(tmp_path).resolve_job_def("lake_maintenance")
    assert set(job.resource_defs) <= {"warehouse", "io_manager"}
    assert not {"backfill", "platform", "inbox"} & set(job.resource_defs)


def load_certificates_job():
    """The code location's load_certificates, from the LESSONSYNC_* settings of the test's environment."""
    return build_definitions(load_settings()).resolve_job_def("load_certificates")


def test_a_successful_run_adds_no_hook_event_and_no_retry_tag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESSONSYNC_DATA_DIR", str(tmp_path / "data"))  # no inbox yet: a load of nothing, and the marts
    (tmp_path / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        # as the daemon runs it: on the job's own executor (execute_in_process would swap it)
        with execute_job(reconstructable(load_certificates_job), instance) as result:
            assert result.success
        events = [e.dagster_event.event_type_value for e in instance.all_logs(result.run_id) if e.dagster_event]
        run = instance.get_run_by_id(result.run_id)
    assert "STEP_SUCCESS" in events
    assert not [e for e in events if e.startswith("HOOK_")], sorted(set(events))
    assert run is not None and "lessonsync/retry" not in run.tags
