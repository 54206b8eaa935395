"""The S3 lake unreachable, or refusing the credentials: the run fails with an error naming the lake's URL
and not the secret, and nothing is committed (cursors and loads where they were)."""

from __future__ import annotations

import os

import duckdb
import pytest
from remote_servers import S3Server, free_port
from stack_helpers import RAW

from pipeline.stack import Stack


@pytest.mark.parametrize("fault", ["unreachable", "refused"])
def test_an_unusable_store_fails_the_run_naming_the_url_without_the_secret(
    s3_stack: Stack, moto_server: S3Server, fault: str, monkeypatch: pytest.MonkeyPatch
):
    url = s3_stack.env["LESSONSYNC_LAKE_URL"]
    assert s3_stack.sync(select=("key:lms/categories",)).success
    before = _cursor_and_loads(s3_stack)
    s3_stack.advance(hours=24)
    if fault == "unreachable":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")  # keep botocore's own retries short in the test
        failed = s3_stack.sync(select=RAW)
    else:
        with moto_server.checking_credentials():  # moto now checks keys: ours is unknown to its IAM
            failed = s3_stack.sync(select=RAW)
    assert not failed.success
    assert url in failed.error and "could not" in failed.error
    assert os.environ["AWS_SECRET_ACCESS_KEY"] not in failed.error + str(failed.materializations)
    assert _cursor_and_loads(s3_stack) == before  # nothing committed, cursors where they were


def _cursor_and_loads(stack: Stack) -> tuple:
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        cursors = conn.execute("SELECT stream, cursor FROM lms._sync_state ORDER BY stream").fetchall()
        return cursors, conn.execute("SELECT count(*) FROM lms._load_runs").fetchone()[0]
