"""Run the sync in-process, the way the nightly schedule does, for cron users, the demo and tests."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dagster import AssetKey, AssetSelection, DagsterInstance, Definitions

from pipeline.defs.analytics.checks import PUBLISHED_KEY
from pipeline.defs.analytics.specs import GROUP
from pipeline.defs.analytics.stale import models_to_run
from pipeline.defs.lake.assets import MART_MIRROR_KEY, RAW_MIRROR_KEY
from pipeline.defs.operations.console import CONSOLE_LOGGER
from pipeline.defs.operations.jobs import NIGHTLY_JOB, SYNC_SELECTION
from pipeline.defs.operations.runs.identity import current_process
from pipeline.defs.operations.runs.pool_wait import PoolWaitTimeout, wait_for_pool
from pipeline.defs.operations.runs.recovery import recover_dead_runs
from pipeline.defs.operations.runs.retry_policy import IN_PROCESS_TAG
from pipeline.defs.policy import POOL
from pipeline.defs.raw.checks import BLOCKING_CHECK
from pipeline.defs.selection import widen_to_whole_multi_assets
from pipeline.instance import ensure_dagster_home
from pipeline.instance.sqlite_writes import sqlite_writes_kept_open
from pipeline.memory import resume_collections
from pipeline.raw.mirror import await_background_mirror
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.raw.prefetch import Prefetch

log = logging.getLogger("lessonsync.sync")
# Run after the loads, in the nightly sync's second run: the models, what publishes them and the Iceberg mirrors.
# The raw tables' mirror started in the background during the loads; its step (after the models, as in one run)
# collects it, so the mirror's last tables are written while the models run, not before they start.
DERIVED_SELECTION = AssetSelection.groups(GROUP) | AssetSelection.assets(RAW_MIRROR_KEY, MART_MIRROR_KEY)


@dataclass
class SyncReport:
    success: bool
    run_id: str
    job_name: str = ""
    materializations: dict[str, dict[str, object]] = field(default_factory=dict)  # asset key -> metadata
    failed_checks: list[str] = field(default_factory=list)
    error: str | None = None
    step_errors: dict[str, str] = field(default_factory=dict)  # failed step -> the message of its root exception
    models_run_id: str | None = None  # the nightly sync's second run: the models, the publish, the marts' mirror
    models_up_to_date: int = 0  # models that run left out: their inputs unchanged since their last build
    failed_run_id: str | None = None  # the run that failed, when not `run_id`


def sync_job_name(*, full_refresh: bool = False, backfill: bool = False) -> str:
    """The job a sync runs: a full refresh, a backfill over a range of days, else the nightly sync."""
    return "full_refresh" if full_refresh else "backfill_progress" if backfill else NIGHTLY_JOB


def run_sync(
    settings: Settings,
    *,
    full_refresh: bool = False,
    select: Sequence[str] = (),
    instance: DagsterInstance | None = None,
    backfill_range: tuple[str, str] | None = None,
    prefetch: Prefetch | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> SyncReport:
    """Materialize the selected assets (default: everything) with their checks: cursor-based, or over
    `backfill_range` (first and last UTC day) as one sweep, the way a backfill launched from the UI runs. With
    `prefetch` (`lessonsync sync`: pipeline/raw/prefetch.py), the run takes its id, and its raw step its fetches.
    `stopping`: whether the command was asked to stop (the nightly sync's models run is not started then)."""
    job_name = sync_job_name(full_refresh=full_refresh, backfill=backfill_range is not None)
    if job_name == NIGHTLY_JOB and not select:
        return _loads_then_models(settings, instance, prefetch, stopping)
    return run_job(
        job_name, settings, select=select, instance=instance, backfill_range=backfill_range, prefetch=prefetch
    )


def _loads_then_models(
    settings: Settings, instance: DagsterInstance | None, prefetch: Prefetch | None, stopping: Callable[[], bool]
) -> SyncReport:
    """The nightly sync as two runs of its job: the loads (raw tables, certificates and their checks), then the
    models whose inputs changed, the publish and the Iceberg mirrors. Dagster plans every asset and check of a run
    when it creates it (an event-log write each); which models must be built is known only after the loads, so the
    second run plans those alone, not the models and tests that would find nothing changed."""
    defs = definitions_for(settings)
    graph = defs.resolve_asset_graph()
    derived = DERIVED_SELECTION.resolve(graph, allow_missing=True)
    loads = sorted(SYNC_SELECTION.resolve(graph) - derived)
    try:
        report = _execute(defs, NIGHTLY_JOB, settings, loads, instance, None, prefetch, await_mirror=False)
        read = DERIVED_SELECTION.upstream().resolve(graph, allow_missing=True) - derived
        unloaded = {k.to_user_string() for k in read} - report.materializations.keys()
        blocked = [c for c in report.failed_checks if c.endswith(f":{BLOCKING_CHECK}")]
        if unloaded or blocked:  # as within one run: a model is not built over a failed load
            return report
        if stopping():
            report.success, report.error = False, "stopped before the models run"
            return report
        return _models_run(defs, derived, settings, instance, report)
    finally:
        await_background_mirror(settings.warehouse_path)  # the command ends with the mirror the loads started


def _models_run(
    defs: Definitions,
    derived: AbstractSet[AssetKey],
    settings: Settings,
    instance: DagsterInstance | None,
    report: SyncReport,
) -> SyncReport:
    """The second run of the nightly sync, its outcome merged into the loads' `report`."""
    stale = models_to_run(settings)
    models = [k for k in derived if k.path[0] == GROUP and k != PUBLISHED_KEY]
    selected = [k for k in models if stale is None or k.path[-1] in stale]
    later = sorted({*selected, *(derived - set(models))})
    log.info(
        "models run: %d model(s) whose inputs changed since their last build%s; %d up to date, not run",
        len(selected),
        f" ({', '.join(k.path[-1] for k in sorted(selected))})" if 0 < len(selected) <= 8 else "",
        len(models) - len(selected),
    )
    models_run = _execute(defs, NIGHTLY_JOB, settings, later, instance, None, None)
    if report.success and not models_run.success:
        report.failed_run_id = models_run.run_id
    report.success = report.success and models_run.success
    report.models_run_id = models_run.run_id
    report.models_up_to_date = len(models) - len(selected)
    report.materializations.update(models_run.materializations)
    report.failed_checks += models_run.failed_checks
    report.error = report.error or models_run.error
    report.step_errors.update(models_run.step_errors)
    return report


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
    defs = definitions_for(settings)
    keys = widen_to_whole_multi_assets(defs, select).keys if select else None
    return _execute(defs, job_name, settings, keys, instance, backfill_range, prefetch)


def definitions_for(settings: Settings) -> Definitions:
    """The code location configured by `settings` (imported on first use: the CLI's --help stays light)."""
    from pipeline.defs.code_location import build_definitions

    return build_definitions(settings)


def _execute(
    defs: Definitions,
    job_name: str,
    settings: Settings,
    keys: Sequence[AssetKey] | None,
    instance: DagsterInstance | None,
    backfill_range: tuple[str, str] | None,
    prefetch: Prefetch | None,
    *,
    await_mirror: bool = True,
) -> SyncReport:
    """Run `job_name` (its assets `keys` and their checks; None: all of them) in this process. `await_mirror`: the
    run ends with the background Iceberg mirror its raw step started (False: the caller awaits it)."""
    job = defs.resolve_job_def(job_name)
    if instance is None:
        ensure_dagster_home(settings)
        instance = DagsterInstance.get()
    # the run's hundreds of events each write Dagster's SQLite storage (instance/sqlite_writes.py)
    with sqlite_writes_kept_open():
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
    if await_mirror:  # a run whose mirror step did not run ends with its mirror
        await_background_mirror(settings.warehouse_path)
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
