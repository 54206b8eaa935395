"""`lessonsync sync` with Dagster's storage in PostgreSQL (LESSONSYNC_DAGSTER_POSTGRES_URL, as docs/deploy.md sets
it up): its raw step adopts the fetches the command started ahead. The instance setup gives the URL its driver
(postgresql+psycopg2://) after the fetches started, and a setting the fetches do not read never discards them."""

from __future__ import annotations

from pathlib import Path

import pytest
from stack_helpers import assert_warehouse_equals_platform, sync_command_adopting_its_fetches

from pipeline.stack import local_stack


@pytest.mark.slow
def test_a_sync_on_the_postgres_instance_adopts_what_it_fetched_ahead(tmp_path: Path, postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql://")  # the form docs/deploy.md gives, without a driver
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        output = sync_command_adopting_its_fetches(
            stack, tmp_path / "dagster_home", LESSONSYNC_DAGSTER_POSTGRES_URL=postgres_url
        )
        assert postgres_url.split("@")[0] not in output  # the URL's credentials are in no line
        assert_warehouse_equals_platform(stack)
