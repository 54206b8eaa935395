"""`lessonsync sync` starts its run's first fetches with the command (pipeline/raw/prefetch.py): the run's raw step
adopts them when it reads the same windows, and discards them, leaving nothing behind, when another run committed
meanwhile; either way the warehouse equals the platform."""

import os
import re
import subprocess
import sys
import time

import pytest
from dagster import DagsterInstance
from iceberg_helpers import ICEBERG_ENV
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.raw.prefetch import fetch_ahead
from pipeline.settings import load_settings
from pipeline.stack import environment, local_stack
from pipeline.sync import run_sync

ADOPTED = "adopted the fetches started"


@pytest.mark.slow
def test_lessonsync_sync_adopts_the_fetches_it_started_and_the_warehouse_equals_the_platform(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success  # cursors to read from, so the run's windows are incremental
        stack.advance(hours=24)
        env = {**os.environ, **stack.run_env(), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sync"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=280,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        adopted = [line for line in done.stdout.splitlines() if ADOPTED in line]
        assert adopted, done.stdout[-3000:]
        assert all(stream in adopted[0] for stream in ("active_lessons", "categories", "groups", "lessons"))
        assert "discarded the fetches" not in done.stdout
        # What the client said while fetching ahead is said by the run's raw step, once (in its event log too).
        said = [line for line in done.stdout.splitlines() if re.search(r"(?<![a-z_])lessons done: ", line)]
        assert len(said) == 1 and " - lms_raw - " in said[0], said
        assert_warehouse_equals_platform(stack)


def test_a_prefetch_another_run_committed_after_is_discarded_without_a_trace_and_the_run_stays_exact(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack, environment(stack.run_env()):
        assert stack.sync(select=RAW).success  # the cursors and last loads the prefetch reads
        prefetch = fetch_ahead(load_settings())
        prefetch.started()
        loads = [fetch.load.load_id for fetch in prefetch.fetches.values()]
        assert len(loads) == 5
        deadline = time.monotonic() + 60
        while not all(fetch.ended for fetch in prefetch.fetches.values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The platform changes, and another run commits every stream before this run's step: what was fetched
        # ahead is older than the warehouse now, and committing it would take the snapshots back a day.
        stack.advance(hours=24)
        assert stack.sync(select=RAW).success
        instance = DagsterInstance.ephemeral()
        report = run_sync(load_settings(), select=RAW, instance=instance, prefetch=prefetch)
        assert report.success, report.error
        assert report.run_id == prefetch.run_id
        messages = [record.user_message for record in instance.all_logs(report.run_id)]
        assert any("discarded the fetches started ahead" in m and "committed a load since" in m for m in messages)
        assert not any(ADOPTED in m for m in messages)
        assert_warehouse_equals_platform(stack)
        lake = stack.data_dir / "lake"
        assert not [path for path in lake.rglob("*") if any(load in str(path) for load in loads)]


# Needed by none of a no-change `lessonsync sync`: the Iceberg library (no mart or table changed), the webhook
# receiver's server, dbt (the default models runner is LessonSync's own), pandas (kept out of sync processes).
NOT_NEEDED = ("pyiceberg", "starlette", "uvicorn", "dbt", "dagster_dbt", "pandas")
REPORT_MODULES = (
    "import atexit, sys\n"
    "from pipeline.cli import main\n"
    "atexit.register(lambda: print('MODULES', *sorted({m.split('.')[0] for m in sys.modules})))\n"
    "sys.exit(main(['sync']))\n"
)


@pytest.mark.slow
def test_a_no_change_sync_imports_nothing_it_does_not_use(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        env = {**os.environ, **stack.run_env(), **ICEBERG_ENV, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
        with environment(ICEBERG_ENV):
            first = stack.sync()  # every asset, the Iceberg tables and marts written
        assert first.success, first.error
        done = subprocess.run(
            [sys.executable, "-c", REPORT_MODULES],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=280,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        mirrored = [line for line in done.stdout.splitlines() if "lake/iceberg_marts: " in line]
        assert mirrored and "tables checked, 0 written" in mirrored[0], done.stdout[-3000:]
        modules = set(next(line for line in done.stdout.splitlines() if line.startswith("MODULES")).split()[1:])
        assert modules.isdisjoint(NOT_NEEDED), sorted(modules & set(NOT_NEEDED))
