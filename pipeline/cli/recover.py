"""Fail the runs whose process died and free the warehouse pool slots they hold: what every run does before
its first step, on demand.

    lessonsync recover                 # this host's runs whose process is gone; a live run, or a run on
                                       # another host, is never touched
    lessonsync recover --run RUN_ID    # that run, once you know it is dead (another host, or a run that never
                                       # recorded its process); refused for a run whose process is alive here"""

from __future__ import annotations

import argparse

from pipeline.cli.options import add_data_dir, settings_from


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("--run", metavar="RUN_ID", help="fail this run and free its pool slots")
    add_data_dir(parser, "where the Dagster home is, unless DAGSTER_HOME is set")


def run(args: argparse.Namespace) -> int:
    # Dagster is imported when the command runs, so that its --help answers at once.
    from dagster import DagsterInstance

    from pipeline.defs.operations.runs.identity import recorded_process, this_host
    from pipeline.defs.operations.runs.recovery import fail_run, recover_dead_runs
    from pipeline.instance import ensure_dagster_home

    ensure_dagster_home(settings_from(args))
    with DagsterInstance.get() as instance:
        if args.run is None:
            messages = recover_dead_runs(instance, by="lessonsync recover")
            print(
                "\n".join(messages) if messages else "nothing to recover: no dead run, no slot held by a finished run"
            )
            return 0
        run = instance.get_run_by_id(args.run)
        if run is None:
            print(f"no run {args.run} in {instance.root_directory}")
            return 1
        process = recorded_process(run.run_id, run.tags)
        if run.is_finished:
            print(f"run {run.run_id} is {run.status.value}; only its slots are freed")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            return 0
        if process is not None and process.host == this_host() and process.is_alive():
            print(f"run {run.run_id} is alive (pid {process.pid} on this host): not touched")
            return 1
        print(fail_run(instance, run, by="lessonsync recover --run"))
        return 0
