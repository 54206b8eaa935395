"""Fixtures: one PostgreSQL and one S3-compatible server per test session (a fresh database and a fresh
bucket per test), and a tiny local stack whose Dagster instance and lake use them."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance
from remote_servers import PostgresServer, S3Server, postgres_server, s3_server, why_postgres_cannot_run

from pipeline.instance import POSTGRES_URL_VARIABLE, ensure_dagster_home
from pipeline.settings import load_settings
from pipeline.stack import Stack, environment, local_stack


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    reason = why_postgres_cannot_run()
    if reason is not None:
        pytest.skip(reason)
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def postgres_url(pg_server: PostgresServer) -> str:
    return pg_server.create_database("t_" + secrets.token_hex(6))


@pytest.fixture
def s3_env(moto_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh bucket, the AWS variables pointing at it (set for the test) and LESSONSYNC_LAKE_URL."""
    bucket = "lake-" + secrets.token_hex(6)
    moto_server.create_bucket(bucket)
    env = {**moto_server.env(), "LESSONSYNC_LAKE_URL": f"s3://{bucket}/lessonsync"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_stack(tmp_path: Path, s3_env: dict[str, str]) -> Iterator[Stack]:
    """A tiny simulator stack whose lake is in a fresh S3 bucket (LESSONSYNC_LAKE_URL in Stack.env)."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env["LESSONSYNC_LAKE_URL"] = s3_env["LESSONSYNC_LAKE_URL"]
        yield stack


@pytest.fixture
def remote_stack(s3_stack: Stack, tmp_path: Path, postgres_url: str) -> Iterator[tuple[Stack, DagsterInstance]]:
    """The S3 stack, and a Dagster instance on a fresh PostgreSQL database (through ensure_dagster_home)."""
    home = {POSTGRES_URL_VARIABLE: postgres_url, "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    s3_stack.env.update(home)
    with environment(home):
        ensure_dagster_home(load_settings(data_dir=s3_stack.data_dir))
        with DagsterInstance.get() as instance:
            yield s3_stack, instance
