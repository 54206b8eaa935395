"""No poison record upstream: an active lesson whose lastDate overflows once converted to UTC
(9999-12-31T23:59:59-14:00), and an answer whose lastDate does (0001-01-01T00:00:00+14:00), are quarantined with its stream, endpoint and field, the rest of the stream loads and
the run succeeds with a warning, on the first sync and on an incremental one (a record touched since)."""

import duckdb
import pytest
from dagster import DagsterInstance

from pipeline.stack import local_stack

OVERFLOWING = "9999-12-31T23:59:59-14:00"


def _query(stack, sql, params=()):
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return conn.execute(sql, list(params)).fetchall()


def _key(identity):
    return [identity["_ownerId"], identity["_userId"], identity["_lessonId"]]


@pytest.mark.slow
def test_an_overflowing_last_date_is_quarantined_and_the_run_succeeds_with_a_warning(tmp_path):
    select = ("key:lms/*",)
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        planted = stack.sim.plant_invalid("active_lessons", field="lastDate", value=OVERFLOWING)
        stack.sim.plant_invalid("answers", field="lastDate", value="0001-01-01T00:00:00+14:00")
        # the shipped dagster.yaml's python_logs: the source's lines are in the run's event log
        instance = DagsterInstance.ephemeral(settings={"python_logs": {"managed_python_loggers": ["lessonsync"]}})
        report = stack.sync(select=select, instance=instance)
        assert report.success, report.error
        metadata = report.materializations["lms/active_lessons"]
        assert metadata["quarantined"] == 1
        assert "lms/active_lessons:contract_unchanged" in report.failed_checks  # a warning: the run succeeds
        warnings = [e.user_message for e in instance.all_logs(report.run_id) if "out of range" in e.user_message]
        assert len(warnings) == 2 and "GET /v1/active-lessons page" in warnings[0] and "lastDate" in warnings[0]
        assert "/answers page" in warnings[1] and "lastDate" in warnings[1]
        truth = len(list(stack.sim.ground_truth("active_lessons")))
        where = "owner_id = ? AND user_id = ? AND lesson_id = ?"
        assert _query(stack, f"SELECT count(*) FROM lms.active_lessons WHERE {where}", _key(planted)) == [(0,)]
        assert _query(stack, "SELECT count(*) FROM lms.active_lessons") == [(truth - 1,)]
        quarantined = _query(stack, "SELECT stream, endpoint, field FROM lms.quarantine ORDER BY stream")
        assert quarantined[0] == ("active_lessons", "/v1/active-lessons", "lastDate")
        [(answers_stream, answers_endpoint, answers_field)] = quarantined[1:]
        assert answers_stream.startswith("answers_by_") and answers_endpoint.endswith("/answers")
        assert answers_field == "lastDate" and report.materializations["lms/answers"]["quarantined"] == 1

        stack.sim.advance(hours=1)  # then one more, touched since: the incremental sync meets it
        early = "0001-01-01T00:00:00+14:00"
        touched = stack.sim.plant_invalid("active_lessons", field="startDate", value=early, index=3, touch=True)
        start = f"SELECT start_date, last_date FROM lms.active_lessons WHERE {where}"
        [loaded_before] = _query(stack, start, _key(touched))
        again = stack.sync(select=select)
        assert again.success, again.error
        assert again.materializations["lms/active_lessons"]["quarantined"] >= 1
        assert "lms/active_lessons:contract_unchanged" in again.failed_checks
        assert _query(stack, "SELECT field FROM lms.quarantine WHERE field = 'startDate'") == [("startDate",)]
        assert _query(stack, start, _key(touched)) == [loaded_before]  # its row keeps what the last good load gave
