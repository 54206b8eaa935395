"""Subprocess of test_status_truth.py: re-executes run <parent run id> from its failure, as the daemon's run
retry does (Dagster records the parent on the new run), in the Dagster home of DAGSTER_HOME; the test interrupts
it with SIGINT while its step runs, as terminating the retry from the UI does."""

from __future__ import annotations

import sys

from dagster import DagsterInstance, JobDefinition, ReexecutionOptions, execute_job, reconstructable


def nightly_sync() -> JobDefinition:
    from pipeline.settings import load_settings
    from pipeline.sync import definitions_for

    return definitions_for(load_settings()).resolve_job_def("nightly_sync")


def main(parent_run_id: str) -> int:
    with DagsterInstance.get() as instance:
        options = ReexecutionOptions.from_failure(parent_run_id, instance)
        with execute_job(reconstructable(nightly_sync), instance, reexecution_options=options) as result:
            return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
