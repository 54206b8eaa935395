"""LessonSync's executor: Dagster's in-process executor (one process, steps one by one) that, inside the
run's own process, records where the run executes (host and pid tags), recovers runs whose process died
before starting any step, waits for pool slots through WatchedConcurrencyContext, runs first the steps whose
background fetch has ended (ready_first.py), and at the run's end stops the background fetches no step took
(pipeline/prefetch)."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

from dagster import ExecutorDefinition, executor
from dagster._core.definitions.executor_definition import IN_PROC_CONFIG, _core_in_process_executor_creation
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.context.system import PlanExecutionContext, PlanOrchestrationContext
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.plan.execute_plan import inner_plan_execution_iterator
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.executor.in_process import InProcessExecutor

from pipeline.defs.operations.runs.identity import current_process, recorded_process
from pipeline.defs.operations.runs.pool_wait import WatchedConcurrencyContext
from pipeline.defs.operations.runs.ready_first import ready_first
from pipeline.defs.operations.runs.recovery import recover_dead_runs
from pipeline.defs.operations.runs.retry_policy import tag_retryable_failures
from pipeline.memory import keep_pandas_out, tune_process_memory
from pipeline.prefetch.runs import close_run
from pipeline.settings import Settings


class WatchedInProcessExecutor(InProcessExecutor):
    def __init__(self, base: InProcessExecutor, pool_wait_timeout: float):
        super().__init__(retries=base.retries, step_dependency_config=base.step_dependency_config)
        self.pool_wait_timeout = pool_wait_timeout

    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        # The objects that exist when the run starts (imports, definitions, Dagster's machinery: over a million) are
        # left out of its garbage collections: each full one walked them all, 110-150 ms with the GIL held (twice in a
        # no-change sync at scale large, stalling the client's event loop as well). Back at the end, so a process
        # that runs again (tests, a sensor's in-process run) still collects what this run left.
        gc.freeze()
        try:
            yield from self._execute(plan_context, execution_plan)
        finally:
            gc.unfreeze()

    def _execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        run = plan_context.dagster_run
        tune_process_memory()  # glibc malloc options, before the run's threads start (pipeline/memory.py)
        keep_pandas_out()  # pyarrow's first list conversion would import it, on the client's event loop
        if recorded_process(run.run_id, run.tags) is None:  # launched by the daemon or the UI, or a retry: tag it
            plan_context.instance.add_run_tags(run.run_id, current_process().tags(run.run_id))
        for message in recover_dead_runs(plan_context.instance, by=f"run {run.run_id}"):
            plan_context.log.warning(message)
        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in process (pid: {os.getpid()})",
            event_specific_data=EngineEventData.in_process(os.getpid(), execution_plan.step_keys_to_execute),
        )
        yield from iter(
            ExecuteRunWithPlanIterable(
                execution_plan=plan_context.execution_plan,
                iterator=self._steps,
                execution_context_manager=PlanExecutionContextManager(
                    job=plan_context.job,
                    retry_mode=plan_context.retry_mode,
                    execution_plan=plan_context.execution_plan,
                    run_config=plan_context.run_config,
                    dagster_run=plan_context.dagster_run,
                    instance=plan_context.instance,
                    raise_on_error=plan_context.raise_on_error,
                    output_capture=plan_context.output_capture,
                    step_dependency_config=self.step_dependency_config,
                ),
            )
        )

    def _steps(self, job_context: PlanExecutionContext, execution_plan: ExecutionPlan) -> Iterator[DagsterEvent]:
        try:
            with WatchedConcurrencyContext(
                job_context.instance, job_context.dagster_run, job_context.log, timeout=self.pool_wait_timeout
            ) as concurrency:
                yield from tag_retryable_failures(
                    inner_plan_execution_iterator(
                        job_context, ready_first(execution_plan, job_context.run_id), concurrency
                    ),
                    job_context.instance,
                    job_context.run_id,
                    dict(job_context.dagster_run.tags),
                )
        finally:  # a failed or stopped run leaves fetches no step took: stopped, their lake parts discarded
            cancelled = close_run(job_context.run_id)
            if cancelled:
                job_context.log.warning(
                    f"stopped the background fetch of {', '.join(cancelled)}: the run ended "
                    "before their steps committed them"
                )


def build_executor(settings: Settings) -> ExecutorDefinition:
    """Dagster's in-process executor, with run-process tags, dead-run recovery and a pool wait that gives up after
    Settings.pool_wait_timeout seconds."""

    @executor(name="lessonsync_in_process", config_schema=IN_PROC_CONFIG)
    def lessonsync_executor(init_context) -> WatchedInProcessExecutor:
        base = _core_in_process_executor_creation(init_context.executor_config)
        return WatchedInProcessExecutor(base, settings.pool_wait_timeout)

    return lessonsync_executor
