"""`lessonsync sync` starts its run's first fetches with the command (pipeline/raw/prefetch.py): the run's raw step
adopts them when it reads the same windows, and discards them, leaving nothing behind, when another run committed
meanwhile; either way the warehouse equals the platform."""

import os
import re
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from dagster import DagsterInstance
from iceberg_helpers import ICEBERG_ENV
from stack_helpers import ADOPTED, RAW, assert_warehouse_equals_platform, sync_command_adopting_its_fetches

from pipeline.raw.prefetch import fetch_ahead
from pipeline.settings import load_settings
from pipeline.stack import environment, local_stack
from pipeline.sync import run_sync


@pytest.mark.slow
def test_lessonsync_sync_adopts_the_fetches_it_started_and_the_warehouse_equals_the_platform(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        output = sync_command_adopting_its_fetches(stack, tmp_path / "dagster_home")
        adopted = [line for line in output.splitlines() if ADOPTED in line]
        assert all(stream in adopted[0] for stream in ("active_lessons", "categories", "groups", "lessons"))
        # What the client said while fetching ahead is said by the run's raw step, once (in its event log too).
        said = [line for line in output.splitlines() if re.search(r"(?<![a-z_])lessons done: ", line)]
        assert len(said) == 1 and " lms_raw] " in said[0], said  # the run's step names the line
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


QUIZ = ("active_lessons", "quizTimeSeconds", "int")  # sent by the simulator from its first advance on


def discovered(stack) -> list[tuple[str, str, str]]:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return conn.execute("SELECT table_name, column_name, type FROM lms._discovered_columns").fetchall()


def test_an_adopted_fetch_makes_a_new_field_a_column_as_the_step_would(tmp_path):
    """The fetch started ahead reads the warehouse's schema as the step does: a field the platform began to send is
    a typed column on the load that adopts it, field for field."""
    with local_stack(tmp_path / "data", scale="tiny", new_fields=[QUIZ]) as stack, environment(stack.run_env()):
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)  # the changed active lessons carry quizTimeSeconds now
        prefetch = fetch_ahead(load_settings())
        instance = DagsterInstance.ephemeral()
        report = run_sync(load_settings(), select=RAW, instance=instance, prefetch=prefetch)
        assert report.success, report.error
        messages = [record.user_message for record in instance.all_logs(report.run_id)]
        assert any(ADOPTED in m and "active_lessons" in m for m in messages)
        assert discovered(stack) == [("active_lessons", "quiz_time_seconds", "BIGINT")]
        assert_warehouse_equals_platform(stack)  # the new column too, field for field


def test_a_prefetch_read_before_another_run_discovered_a_column_is_discarded_and_the_run_stays_exact(tmp_path):
    """Another run commits the new column between the look ahead and the step: the prefetch's client placed the
    field by the older schema, so the step discards it and fetches with a client of its own, exactly."""
    with local_stack(tmp_path / "data", scale="tiny", new_fields=[QUIZ]) as stack, environment(stack.run_env()):
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)
        prefetch = fetch_ahead(load_settings())
        prefetch.started()
        loads = [fetch.load.load_id for fetch in prefetch.fetches.values()]
        assert stack.sync(select=RAW).success  # discovers quiz_time_seconds and commits it
        stack.advance(hours=24)
        instance = DagsterInstance.ephemeral()
        report = run_sync(load_settings(), select=RAW, instance=instance, prefetch=prefetch)
        assert report.success, report.error
        messages = [record.user_message for record in instance.all_logs(report.run_id)]
        assert any("discarded the fetches started ahead" in m and "discovered columns" in m for m in messages)
        assert discovered(stack) == [("active_lessons", "quiz_time_seconds", "BIGINT")]
        assert_warehouse_equals_platform(stack)
        lake = stack.data_dir / "lake"
        assert not [path for path in lake.rglob("*") if any(load in str(path) for load in loads)]


def test_a_command_stopped_while_fetching_ahead_says_so_in_one_line_and_discards_what_it_fetched(tmp_path):
    """SIGTERM while the fetches started with the command are under way, before its run's raw step: the command
    ends within its grace with the FAILED line (no traceback), and what it fetched ahead is discarded (cancelled,
    lake parts removed: pipeline/raw/prefetch.py) rather than left to the process's end."""
    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=200", page_size=5) as stack:
        env = {**os.environ, **stack.run_env(), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
        began = time.monotonic()
        command = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "sync"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the fetches ahead are reading several listings
            listings = {
                r.path.split("?")[0] for r in stack.sim.request_log() if r.arrived >= began and "page" in r.path
            }
            if len(listings) >= 3 or command.poll() is not None:
                break
            time.sleep(0.05)
        assert command.poll() is None, "the command ended before the test could stop it"
        signalled = time.monotonic()
        command.send_signal(signal.SIGTERM)
        output = command.communicate(timeout=60)[0].decode()
        assert time.monotonic() - signalled < 15, output[-3000:]
        assert command.returncode == 1, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        assert output.strip().splitlines()[-1].startswith("sync FAILED: stopped by SIGTERM"), output[-3000:]
        assert "discarded the fetches started ahead" in output, output[-3000:]


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
