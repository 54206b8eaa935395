"""A record of a snapshot that breaks its schema is quarantined, and its row stays: a bad record never marks a
good row deleted."""

import duckdb
import pytest

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
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            kept = conn.execute("SELECT deleted_at FROM lms.categories WHERE id = ?", [planted["id"]]).fetchall()
            quarantined = conn.execute("SELECT endpoint, field FROM lms.quarantine").fetchall()
            live = conn.execute("SELECT count(*) FROM lms.categories WHERE deleted_at IS NULL").fetchone()[0]
        assert kept == [(None,)], "the quarantined category's row was marked deleted"
        assert quarantined == [("/v1/categories", "name")]
        assert live == len(list(stack.sim.ground_truth("categories")))
