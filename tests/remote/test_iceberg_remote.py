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
