"""The Iceberg mirror (pipeline/warehouse/iceberg.py): after full, incremental and deleting syncs every raw table
read through pyiceberg and polars equals the warehouse; a load that changes nothing writes nothing."""

from __future__ import annotations

import pytest
from iceberg_helpers import assert_iceberg_equals_warehouse, open_catalog
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.settings import load_settings
from pipeline.stack import environment, local_stack
from pipeline.warehouse.tabledef import SCHEMA


def _snapshot_ids(settings) -> dict[str, int | None]:
    catalog = open_catalog(settings)
    ids = {}
    for identifier in catalog.list_tables(SCHEMA):
        snapshot = catalog.load_table(identifier).current_snapshot()
        ids[identifier[-1]] = snapshot.snapshot_id if snapshot else None
    return ids


@pytest.mark.slow
def test_every_raw_table_equals_the_warehouse_after_full_incremental_and_no_change_syncs(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success
        with environment(stack.run_env()):
            settings = load_settings()
        rows = assert_iceberg_equals_warehouse(settings)
        assert rows["answers"] > 0 and rows["groups"] > 0

        stack.advance(hours=24)
        assert stack.sync(select=RAW).success
        assert_warehouse_equals_platform(stack)
        assert_iceberg_equals_warehouse(settings)

        before = _snapshot_ids(settings)
        assert stack.sync(select=RAW).success  # nothing changed on the platform
        assert _snapshot_ids(settings) == before
