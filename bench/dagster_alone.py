"""What Dagster alone costs for the runs one `lessonsync sync` made (not a test; bench/start_bench.py runs it after
each command): the same runs, steps, planned and yielded materializations, planned and evaluated checks and log
lines, replayed by assets whose bodies do nothing, in a process of its own (interpreter start to exit, as the
command is timed), under a DAGSTER_HOME of its own with LessonSync's dagster.yaml and the command's storage (SQLite,
its writes held open as the product's runs hold them: pipeline/instance/sqlite_writes.py; or PostgreSQL). Log lines
of no step are not replayed. What the command costs beyond it is our own work: imports, fetches, commits, models,
publishing, the Iceberg mirror.

    shapes = run_shapes(instance, run_ids)    # read from the command's own instance
    python -m bench.dagster_alone SHAPE_JSON   # the replay (a JSON list of asdict(RunShape)); DAGSTER_HOME set
"""

# No `from __future__ import annotations`: Dagster reads the step functions' annotations at runtime.

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    DagsterEventType,
    DagsterInstance,
    Definitions,
    MaterializeResult,
    multi_asset,
    multi_asset_check,
)

from pipeline.instance.sqlite_writes import sqlite_writes_kept_open


@dataclass
class StepShape:
    assets: int = 0  # materializations planned (the step's selected assets)
    checks: int = 0  # check evaluations planned
    materialized: int = 0
    evaluated: int = 0
    logs: int = 0  # log lines of the step


@dataclass
class RunShape:
    steps: list[StepShape] = field(default_factory=list)


def run_shapes(instance: DagsterInstance, run_ids: Sequence[str]) -> list[RunShape]:
    """The shape of each run, read from its events, in the order given."""
    counted = {
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED: "assets",
        DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED: "checks",
        DagsterEventType.ASSET_MATERIALIZATION: "materialized",
        DagsterEventType.ASSET_CHECK_EVALUATION: "evaluated",
    }
    shapes = []
    for run_id in run_ids:
        steps: dict[str, StepShape] = {}
        for entry in instance.all_logs(run_id):
            if entry.step_key is None:
                continue
            step = steps.setdefault(entry.step_key, StepShape())
            if entry.dagster_event_type is None:
                # Dagster's own line about outputs a step skipped: the replay's steps skip as many and say it too
                step.logs += "did not yield or return" not in entry.user_message
            elif entry.dagster_event_type in counted:
                name = counted[entry.dagster_event_type]
                setattr(step, name, getattr(step, name) + 1)
        shapes.append(RunShape([s for s in steps.values() if s.assets or s.checks]))
    return shapes


def _read_shapes(text: str) -> list[RunShape]:
    return [RunShape([StepShape(**step) for step in run["steps"]]) for run in json.loads(text)]


def replay(shapes: Sequence[RunShape]) -> list[str]:
    """Run each shape in-process on DagsterInstance.get(), one run after the other; the runs' ids."""
    assets, checks, selections = [], [], []
    for r, run in enumerate(shapes):
        keys: list[AssetKey] = []
        for s, step in enumerate(run.steps):
            name = f"run{r}_step{s}"
            if step.assets:
                definition, step_keys = _step_asset(name, step)
                assets.append(definition)
                keys.extend(step_keys)
            else:
                checks.append(_step_checks(name, step, keys[0] if keys else None))
        selections.append(keys)
    defs = Definitions(assets=assets, asset_checks=checks)
    job = defs.resolve_implicit_global_asset_job_def()
    run_ids = []
    with DagsterInstance.get() as instance, sqlite_writes_kept_open():
        for keys in selections:
            result = job.execute_in_process(instance=instance, asset_selection=keys)
            run_ids.append(result.run_id)
    return run_ids


def _step_asset(name: str, step: StepShape) -> tuple[Any, list[AssetKey]]:
    """The step's multi-asset and its assets' keys, those it materializes first."""
    specs = [AssetSpec(["alone", name, f"a{i}"], skippable=True) for i in range(step.assets)]
    check_specs = [AssetCheckSpec(f"c{j}", asset=specs[j % len(specs)].key) for j in range(step.checks)]

    @multi_asset(name=name, specs=specs, check_specs=check_specs, can_subset=True)
    def _step(context: AssetExecutionContext) -> Iterator[Any]:
        for i in range(step.logs):
            context.log.info(f"line {i}")
        for spec in specs[: step.materialized]:
            yield MaterializeResult(asset_key=spec.key)
        for check in check_specs[: step.evaluated]:
            yield AssetCheckResult(asset_key=check.asset_key, check_name=check.name, passed=True)

    return _step, [spec.key for spec in specs]


def _step_checks(name: str, step: StepShape, target: AssetKey | None) -> Any:
    """A step of checks only (a multi_asset_check), on the run's first asset (one its step materializes, unless that
    step materializes none): selected along with it."""
    if target is None:
        raise ValueError(f"{name}: a step of checks only comes after a step of assets in its run")
    check_specs = [AssetCheckSpec(f"{name}_c{j}", asset=target) for j in range(step.checks)]

    @multi_asset_check(name=name, specs=check_specs, can_subset=True)
    def _checks(context: AssetCheckExecutionContext) -> Iterator[Any]:
        for i in range(step.logs):
            context.log.info(f"line {i}")
        for check in check_specs[: step.evaluated]:
            yield AssetCheckResult(asset_key=check.asset_key, check_name=check.name, passed=True)

    return _checks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.dagster_alone SHAPE_JSON (DAGSTER_HOME set)", file=sys.stderr)
        return 2
    print(json.dumps(replay(_read_shapes(Path(args[0]).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
