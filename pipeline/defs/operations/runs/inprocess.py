"""`JobDefinition.execute_in_process`, with the job's own executor (the code location's, LessonSync's) instead of
the stock one it forces in (`execute_in_process_executor`), so `lessonsync sync` and the demo get the same run-process tags, dead-run
recovery and watched pool wait as runs the daemon launches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dagster import AssetKey, DagsterInstance, JobDefinition
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.execution.execute_in_process import core_execute_in_process, merge_run_tags
from dagster._core.execution.execute_in_process_result import ExecuteInProcessResult
from dagster._core.utils import make_new_run_id

from pipeline.defs.operations.runs.identity import current_process
from pipeline.defs.operations.runs.retry_policy import IN_PROCESS_TAG


def execute_in_process(
    job: JobDefinition,
    *,
    instance: DagsterInstance,
    run_config: Mapping[str, object],
    asset_selection: Sequence[AssetKey] | None = None,
    partition_key: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> ExecuteInProcessResult:
    """Run `job` (resolved from the code location, so with its executor) here, never raising on a failed step;
    the run is tagged with this process from its creation, so a kill even before its first step leaves a run the
    next one can judge."""
    selection = list(asset_selection or [])
    run_id = make_new_run_id()
    ephemeral = job.as_ephemeral_job(resource_defs={}, input_values={}, asset_selection=selection)
    process_tags = current_process().tags(run_id)
    run_tags = merge_run_tags(
        job_def=job,
        partition_key=partition_key,
        tags={**(tags or {}), **process_tags, IN_PROCESS_TAG: "true"},
        asset_selection=selection,
        instance=instance,
        run_config=run_config,
    )
    executable = InMemoryJob(ephemeral.with_executor_def(job.executor_def))
    return core_execute_in_process(
        run_config=run_config,
        job=executable,
        instance=instance,
        output_capturing_enabled=True,
        raise_on_error=False,
        run_tags=run_tags,
        run_id=run_id,
        asset_selection=frozenset(selection),
    )
