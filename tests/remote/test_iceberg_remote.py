"""The Iceberg mirror in production's shape: the tables in an S3 bucket (moto on loopback), the catalog in the
Dagster instance's PostgreSQL database (a real server). After a full and an incremental sync every raw table and
mart read through pyiceberg and polars equals the warehouse, and the catalog rows are where a JDBC catalog
(Trino, Spark) looks for them."""

from __future__ import annotations

import psycopg2
import pytest
from iceberg_helpers import ICEBERG_ENV, assert_iceberg_equals_warehouse, assert_marts_equal, open_catalog
from stack_helpers import assert_warehouse_equals_platform

from pipeline.settings import load_settings
from pipeline.stack import environment
from pipeline.warehouse.lake.iceberg import CATALOG_NAME, MARTS_NAMESPACE, iceberg_location

pytestmark = pytest.mark.slow


def test_tables_on_s3_with_the_catalog_in_postgres_equal_the_warehouse(remote_stack, postgres_url):
    stack, instance = remote_stack
    stack.env.update(ICEBERG_ENV)
    assert stack.sync(instance=instance).success
    with environment(stack.run_env()):
        settings = load_settings()
    where = iceberg_location(settings.lake)
    assert where is not None and where.location.startswith("s3://")
    assert where.catalog_url == postgres_url
    assert_iceberg_equals_warehouse(settings)

    stack.advance(hours=24)
    assert stack.sync(instance=instance).success
    assert_warehouse_equals_platform(stack)
    rows = assert_iceberg_equals_warehouse(settings)
    assert rows["answers"] > 0
    marts = [name for (_, name) in open_catalog(settings).list_tables(MARTS_NAMESPACE)]
    assert marts
    assert_marts_equal(settings, marts)

    with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM iceberg_tables WHERE catalog_name = %s", (CATALOG_NAME,))
        (count,) = cur.fetchone()
    assert count == len(rows) + len(marts)


def test_a_lock_held_in_the_postgres_catalog_fails_only_the_mirror_step_within_its_bound(remote_stack, postgres_url):
    """A session holding a lock the catalog's commits need (a long transaction, a `LOCK TABLE` of an admin) is
    waited for LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT at most, as a locked SQLite catalog is: then the mirror steps
    fail, every raw load committed, and the next run brings the tables up."""
    stack, instance = remote_stack
    stack.env.update(ICEBERG_ENV)
    assert stack.sync(instance=instance).success
    stack.advance(hours=24)
    holder = psycopg2.connect(postgres_url)
    try:
        with holder.cursor() as cur:  # psycopg2 opens a transaction: the lock is held until the rollback
            cur.execute("LOCK TABLE iceberg_tables IN EXCLUSIVE MODE")  # readers pass, no commit does
        stack.env["LESSONSYNC_ICEBERG_CATALOG_BUSY_TIMEOUT"] = "2"
        report = stack.sync(instance=instance)
        assert not report.success
        assert "lake/iceberg_tables" in (report.error or "") and "stayed locked" in (report.error or ""), report.error
        assert postgres_url.split("@")[0] not in (report.error or "")  # the URL's credentials are never said
        assert_warehouse_equals_platform(stack)
    finally:
        holder.rollback()
        holder.close()
    healed = stack.sync(instance=instance)
    assert healed.success, healed.error
    with environment(stack.run_env()):
        assert_iceberg_equals_warehouse(load_settings())


def test_every_catalog_connection_keeps_its_lock_bound_across_rollbacks(postgres_url):
    """The bound is a statement each connection runs as it opens, committed: the pool's rollbacks keep it, and the
    URL stays one PgBouncer or RDS Proxy accepts (no `options` connection parameter)."""
    from sqlalchemy import create_engine, text

    from pipeline.warehouse.lake.iceberg import bound_lock_waits, sqlalchemy_url

    url = sqlalchemy_url(postgres_url, 2.5)
    assert "options" not in url
    engine = create_engine(url)
    try:
        with engine.connect() as conn:  # opened before the bound: closed by it
            conn.execute(text("SELECT 1"))
        bound_lock_waits(engine, 2.5)
        for _ in range(2):
            with engine.connect() as conn:
                assert conn.execute(text("SHOW lock_timeout")).scalar() == "2500ms"
                conn.rollback()
    finally:
        engine.dispose()
