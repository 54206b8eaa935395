"""Dagster alone (bench/dagster_alone.py, used by bench/start_bench.py): a replay makes the runs it was given, step
for step, with the same planned and yielded materializations, checks and log lines, so the events it stores are
those of the command it stands for. Never timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from dagster import DagsterInstance

from bench.dagster_alone import RunShape, StepShape, run_shapes
from pipeline.instance import instance_config
from pipeline.stack import environment

# the shape of a loads run and a models run: a step that skips some planned outputs, one of checks only, logs
SHAPES = [
    RunShape(
        [
            StepShape(assets=4, checks=6, materialized=3, evaluated=2, logs=2),
            StepShape(assets=0, checks=2, materialized=0, evaluated=1, logs=1),
        ]
    ),
    RunShape([StepShape(assets=2, checks=3, materialized=2, evaluated=3, logs=0), StepShape(assets=1, materialized=1)]),
]


def test_a_replay_stores_the_runs_it_was_given_step_for_step(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_config(False), encoding="utf-8")
    shape_file = tmp_path / "shape.json"
    shape_file.write_text(json.dumps([asdict(run) for run in SHAPES]))
    done = subprocess.run(
        [sys.executable, "-m", "bench.dagster_alone", str(shape_file)],
        env={**os.environ, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with environment({"DAGSTER_HOME": str(home)}), DagsterInstance.get() as instance:
        run_ids = [run.run_id for run in reversed(instance.get_runs())]
        assert len(run_ids) == 2
        assert run_shapes(instance, run_ids) == SHAPES
        events = Counter(
            entry.dagster_event_type.value
            for run_id in run_ids
            for entry in instance.all_logs(run_id)
            if entry.dagster_event_type
        )
    assert events["ASSET_MATERIALIZATION_PLANNED"] == 4 + 2 + 1
    assert events["ASSET_CHECK_EVALUATION_PLANNED"] == 6 + 2 + 3
    assert events["ASSET_CHECK_EVALUATION"] == 2 + 1 + 3
    assert events["STEP_SUCCESS"] == 4
