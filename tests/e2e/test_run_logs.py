"""Source logs (`lessonsync.source`: retries, quarantine, drift) reach the run's event log under the shipped
instance config, and `lessonsync sync` still prints them, once."""

import os
import subprocess
import sys

import pytest
from dagster import DagsterInstance

from pipeline.instance import SHIPPED_CONFIG
from pipeline.stack import local_stack

CATEGORIES = ("key:lms/categories",)


@pytest.mark.slow
def test_a_retry_line_reaches_the_event_log_and_the_console_once(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env["LESSONSYNC_RETRY_MAX_WAIT"] = "0.2"
        stack.sim.set_faults("rate_limit_every=2")  # every other request answers 429: retries for sure
        with DagsterInstance.from_config(str(home)) as instance:
            report = stack.sync(select=CATEGORIES, instance=instance)
            assert report.success, report.error
            messages = [entry.user_message for entry in instance.all_logs(report.run_id)]
        retries = [m for m in messages if m.startswith("retrying GET /v1/")]
        assert retries and all("429" in m for m in retries), messages

        cli = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sync", "--select", CATEGORIES[0]],
            env={**os.environ, **stack.run_env(), "DAGSTER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    output = cli.stdout + cli.stderr
    assert cli.returncode == 0, output[-3000:]
    lines = [line for line in output.splitlines() if "retrying GET /v1/" in line]
    assert lines, output[-3000:]
    first = lines[0].split("retrying", 1)[1]
    assert sum(line.endswith(first) for line in lines) == 1, "a retry line printed twice:\n" + "\n".join(lines)
