"""A record of a snapshot that breaks its schema is quarantined, and its row stays: a bad record never marks a
good row deleted. New fields kept in `extra` are counted, logged once with their paths, and warned about by an asset
check; under the default contract they become a column."""

import duckdb
import pytest
from dagster import DagsterInstance

from pipeline.stack import local_stack


@pytest.mark.slow
def test_a_quarantined_snapshot_record_keeps_its_row_and_marks_nothing_deleted(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=("key:lms/categories",)).success
        planted = stack.sim.plant_invalid("categories", field="name", value=["not", "a", "name"])
        report = stack.sync(select=("key:lms/categories",))
        assert report.success, report.error
        metadata = report.materializations["lms/categories"]
        assert metadata["quarantined"] == 1 and metadata["rows_deleted"] == 0
        assert report.failed_checks == ["lms/categories:contract_unchanged"]  # a warning, the run succeeds
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            kept = conn.execute("SELECT deleted_at FROM lms.categories WHERE id = ?", [planted["id"]]).fetchall()
            quarantined = conn.execute("SELECT endpoint, field FROM lms.quarantine").fetchall()
            live = conn.execute("SELECT count(*) FROM lms.categories WHERE deleted_at IS NULL").fetchone()[0]
        assert kept == [(None,)], "the quarantined category's row was marked deleted"
        assert quarantined == [("/v1/categories", "name")]
        assert live == len(list(stack.sim.ground_truth("categories"))) == metadata["dagster/row_count"]


@pytest.mark.slow
def test_new_fields_are_counted_logged_once_with_their_paths_and_warned_by_a_check(tmp_path):
    """Under `discard_value` a new field stays in `extra`, counted; the default `evolve` then makes it a column
    (docs/schema-evolution.md), from the very page the page cache kept."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        stack.env["LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM"] = "categories=discard_value"
        clean = stack.sync(select=("key:lms/categories",))
        assert clean.success and "lms/categories:contract_unchanged" not in clean.failed_checks
        for index in (0, 1):
            stack.sim.plant_invalid("categories", field="colourCode", value="#00ff00", index=index)
        instance = DagsterInstance.ephemeral()
        report = stack.sync(select=("key:lms/categories",), instance=instance)
        assert report.success, report.error
        metadata = report.materializations["lms/categories"]
        assert metadata["new_fields"] == 1 and metadata["new_field_paths"] == ["colourCode"]
        assert metadata["quarantined"] == 0
        assert report.failed_checks == ["lms/categories:contract_unchanged"]
        warnings = [e.user_message for e in instance.all_logs(report.run_id) if "do not declare" in e.user_message]
        assert len(warnings) == 1 and "categories.colourCode (2 records)" in warnings[0]

        del stack.env["LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM"]  # evolve
        evolved = stack.sync(select=("key:lms/categories",))
        assert evolved.success, evolved.error
        metadata = evolved.materializations["lms/categories"]
        assert metadata["pages_from_cache"] == metadata["pages"] and metadata["new_fields"] == 0
        assert metadata["new_columns"][0].startswith("new column `categories.colour_code` VARCHAR (field colourCode)")
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            colours = conn.execute(
                "SELECT colour_code, extra FROM lms.categories WHERE colour_code IS NOT NULL"
            ).fetchall()
        assert colours == [("#00ff00", None), ("#00ff00", None)]
