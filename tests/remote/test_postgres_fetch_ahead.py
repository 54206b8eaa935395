"""`lessonsync sync` with Dagster's storage in PostgreSQL (LESSONSYNC_DAGSTER_POSTGRES_URL, as docs/deploy.md sets
it up): its raw step adopts the fetches the command started ahead. The instance setup gives the URL its driver
(postgresql+psycopg2://) after the fetches started, and a setting the fetches do not read never discards them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.stack import local_stack

ADOPTED = "adopted the fetches started"


@pytest.mark.slow
def test_a_sync_on_the_postgres_instance_adopts_what_it_fetched_ahead(tmp_path: Path, postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql://")  # the form docs/deploy.md gives, without a driver
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success  # cursors to read from: the fetches ahead are incremental
        stack.advance(hours=24)
        env = {
            **os.environ,
            **stack.run_env(),
            "DAGSTER_HOME": str(tmp_path / "dagster_home"),
            "LESSONSYNC_DAGSTER_POSTGRES_URL": postgres_url,
        }
        done = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "sync"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=280,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        assert "discarded the fetches" not in done.stdout, done.stdout[-3000:]
        assert any(ADOPTED in line for line in done.stdout.splitlines()), done.stdout[-3000:]
        assert postgres_url.split("@")[0] not in done.stdout  # the URL's credentials are in no line
        assert_warehouse_equals_platform(stack)
