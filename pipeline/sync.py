"""Run the sync in-process, the way the nightly schedule does, for cron users, the demo and tests."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster import AssetKey, DagsterInstance, Definitions

from pipeline.defs.operations.console import CONSOLE_LOGGER
from pipeline.defs.operations.runs.identity import current_process
from pipeline.defs.operations.runs.pool_wait import PoolWaitTimeout, wait_for_pool
from pipeline.defs.operations.runs.recovery import recover_dead_runs
from pipeline.defs.operations.runs.retry_policy import IN_PROCESS_TAG
from pipeline.defs.policy import POOL
from pipeline.defs.selection import widen_to_whole_multi_assets
from pipeline.instance import ensure_dagster_home
from pipeline.memory import resume_collections
from pipeline.raw.mirror import await_background_mirror
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.raw.prefetch import Prefetch

log = logging.getLogger("lessonsync.sync")


@dataclass
class SyncReport:
    success: bool
    run_id: str
    job_name: str = ""
    materializations: dict[str, dict[str, object]] = field(default_factory=dict)  # asset key -> metadata
    failed_checks: list[str] = field(default_factory=list)
    error: str | None = None
    step_errors: dict[str, str] = field(default_factory=dict)  # failed step -> the message of its root exception


def sync_job_name(*, full_refresh: bool = False, backfill: bool = False) -> str:
    """The job a sync runs: a full refresh, a backfill over a range of days, else the nightly sync."""
    return "full_refresh" if full_refresh else "backfill_progress" if backfill else "nightly_sync"


def run_sync(
    settings: Settings,
    *,
    full_refresh: bool = False,
    select: Sequence[str] = (),
    instance: DagsterInstance | None = None,
    backfill_range: tuple[str, str] | None = None,
    prefetch: Prefetch | None = None,
) -> SyncReport:
    """Materialize the selected assets (default: everything) with their checks: cursor-based, or over
    `backfill_range` (first and last UTC day) as one sweep, the way a backfill launched from the UI runs. With
    `prefetch` (`lessonsync sync`: pipeline/raw/prefetch.py), the run takes its id, and its raw step its fetches."""
    job_name = sync_job_name(full_refresh=full_refresh, backfill=backfill_range is not None)
    return run_job(
        job_name, settings, select=select, instance=instance, backfill_range=backfill_range, prefetch=prefetch
    )


def run_job(
    job_name: str,
    settings: Settings,
    *,
    select: Sequence[str] = (),
    instance: DagsterInstance | None = None,
    backfill_range: tuple[str, str] | None = None,
    prefetch: Prefetch | None = None,
) -> SyncReport:
    """Execute a job of the code location configured by `settings` in this process and summarise what it did
    (on `instance`, default: the persistent one of `ensure_dagster_home`)."""
    return _execute(job_name, settings, select, instance, backfill_range, prefetch)


def definitions_for(settings: Settings) -> Definitions:
    """The code location configured by `settings` (imported on first use: the CLI's --help stays light)."""
    from pipeline.defs.code_location import build_definitions

    return build_definitions(settings)


def _execute(
    job_name: str,
    settings: Settings,
    select: Sequence[str],
    instance: DagsterInstance | None,
    backfill_range: tuple[str, str] | None,
    prefetch: Prefetch | None,
) -> SyncReport:
    defs = definitions_for(settings)
    job = defs.resolve_job_def(job_name)
    if instance is None:
        ensure_dagster_home(settings)
        instance = DagsterInstance.get()
    keys = _selected_keys(defs, select) if select else None
    resume_collections()  # the definitions are built: a command that paused collections freezes them (memory.py)
    backfill: dict[str, object] = {}
    if backfill_range is not None:  # what the Launchpad sets for a backfill (pipeline/defs/progress/backfill.py)
        first, last = backfill_range
        backfill = {"resources": {"backfill": {"config": {"updated_from": first, "updated_to": last}}}}
    # LessonSync's console logger (pipeline/defs/operations/console.py): the run's lines in the format of every other
    # line of the process. Dagster logs every engine event at DEBUG; cron users and the demo want the assets' own
    # progress lines (INFO) and problems. LESSONSYNC_LOG_LEVEL=DEBUG brings the engine events back.
    loggers = {"loggers": {CONSOLE_LOGGER: {"config": {"log_level": settings.log_level}}}}
    # Before the run: this host's runs whose process is gone are failed and their slots freed, then the pool is
    # waited for (Dagster's in-process wait would spin without an end: pool_wait.py); the run is tagged with this
    # process from its creation, so a kill even before its first step leaves a run the next one can judge.
    run_id = prefetch.run_id if prefetch is not None else str(uuid.uuid4())
    for message in recover_dead_runs(instance, by=f"run {run_id}"):
        log.warning(message)
    try:
        waited = wait_for_pool(instance, POOL, timeout=settings.pool_wait_timeout, report=log.warning)
    except PoolWaitTimeout as error:
        return SyncReport(success=False, run_id=run_id, job_name=job_name, error=str(error))
    if prefetch is not None:
        if waited:  # another writer held the warehouse meanwhile: fetched before it, not judged but discarded
            prefetch.discard(
                f"the pool '{POOL}' was busy for {waited:.0f} s (another run); the step fetches them itself"
            )
        prefetch.started()  # its read-only look at the warehouse is over before a step opens the file
    result = job.execute_in_process(
        run_config={**loggers, **backfill},
        instance=instance,
        asset_selection=keys,
        run_id=run_id,
        tags={**current_process().tags(run_id), IN_PROCESS_TAG: "true"},
        raise_on_error=False,
    )
    await_background_mirror(settings.warehouse_path)  # a run whose mirror step did not run ends with its mirror
    report = SyncReport(success=result.success, run_id=result.run_id, job_name=job_name)
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        report.materializations[materialization.asset_key.to_user_string()] = {
            name: value.value for name, value in materialization.metadata.items()
        }
    for evaluation in result.get_asset_check_evaluations():
        if not evaluation.passed:
            report.failed_checks.append(f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}")
    if not result.success:
        failures = [e for e in result.all_events if e.is_step_failure]
        report.step_errors = {e.step_key or "?": _root_message(e.step_failure_data.error) for e in failures}
        report.error = _root_message(failures[0].step_failure_data.error) if failures else _run_failure(result)
    return report


def _run_failure(result: Any) -> str:
    """Why a run failed outside any step (e.g. a pool wait that timed out)."""
    failure = next((e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"), None)
    data = failure.event_specific_data if failure else None
    return _root_message(data.error) if data is not None and data.error is not None else "the run failed"


def _root_message(error: Any) -> str:
    """The message of the exception that started it all, not Dagster's 'error occurred in op' wrapper."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return str(error.message).strip()


def _selected_keys(defs: Definitions, select: Sequence[str]) -> list[AssetKey]:
    return widen_to_whole_multi_assets(defs, select).keys
