"""End to end, real Dagster runs against the simulator over HTTP: after every sync the warehouse equals
the platform, row for row and field for field."""

from datetime import timedelta

import duckdb
import pytest
from dagster import AssetKey, DagsterInstance, DagsterInvalidConfigError
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.defs.policy import BACKFILL_WINDOW
from pipeline.defs.progress.backfill import NO_RANGE
from pipeline.settings import load_settings
from pipeline.stack import environment, local_stack
from pipeline.sync import definitions_for
from pipeline.verify import compare_warehouse
from pipeline.warehouse import snapshot_seen

SNAPSHOT_TABLES = tuple(table for s in SYNC_STREAMS.values() if s.kind == "snapshot" for table in s.table_names)


def _load_seqs(conn, run_id):
    return [seq for (seq,) in conn.execute("SELECT load_seq FROM lms._load_runs WHERE run_id = ?", [run_id]).fetchall()]


def _metadata(report, key):
    assert report.success, report.error
    return report.materializations[key]


@pytest.mark.slow
def test_full_then_incremental_sync_equals_platform_and_reads_only_the_window(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        full = stack.sync(select=RAW)
        assert_warehouse_equals_platform(stack)
        assert not full.failed_checks
        full_answers = _metadata(full, "lms/answers")
        assert _metadata(full, "lms/active_lessons")["window"].startswith("full")

        stack.advance(hours=24)
        incremental = stack.sync(select=RAW)
        assert_warehouse_equals_platform(stack)
        assert not incremental.failed_checks
        active = _metadata(incremental, "lms/active_lessons")
        answers = _metadata(incremental, "lms/answers")
        assert active["window"].startswith("incremental")
        # Only the changed window: a few percent of the records, far fewer answer requests than the full plan.
        assert 0 < active["rows_fetched"] < 0.25 * _metadata(full, "lms/active_lessons")["rows_fetched"]
        assert answers["requests"] < full_answers["requests"]
        assert answers["rows_fetched"] < full_answers["rows_fetched"]
        certificates = _metadata(incremental, "lms/certificate_events")
        assert certificates["events_loaded"] > 0


@pytest.mark.slow
def test_rerunning_a_window_changes_nothing_and_a_future_cursor_reads_nothing(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            before = conn.execute(
                "SELECT count(*), sum(hash(user_id, lesson_id, last_date)) FROM lms.active_lessons"
            ).fetchone()

        again = stack.sync(select=RAW)
        for key in ("lms/active_lessons", "lms/answers", "lms/answer_results", "lms/users"):
            assert _metadata(again, key)["rows_inserted"] == 0, key
            assert _metadata(again, key)["rows_updated"] == 0, key
        assert_warehouse_equals_platform(stack)
        # Nothing changed on the platform: every snapshot page comes from the page cache, every snapshot repeats
        # the first sync's and is applied without comparing or writing its rows (pipeline/warehouse/merge/repeats.py),
        # yet the load's record says it saw each live row (lms._snapshot_seen).
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            for table in SNAPSHOT_TABLES:
                meta = _metadata(again, f"lms/{table}")
                assert meta["pages_from_cache"] == meta["pages"] > 0, table  # none decoded again (page_cache.py)
                assert meta["unchanged_since_load"] < min(_load_seqs(conn, again.run_id)), table
                assert meta["rows_unchanged"] == meta["dagster/row_count"] > 0, table
                seq, committed = conn.execute(
                    f"SELECT load_seq, committed_at FROM lms._load_runs WHERE run_id = ? AND json_exists(tables, '$.{table}')",
                    [again.run_id],
                ).fetchone()
                written = f"SELECT count(*) FROM lms.{table} WHERE last_loaded_at >= ?"
                assert conn.execute(written, [committed]).fetchone()[0] == 0, table
                assert snapshot_seen(conn, table) == (seq, committed), table

        future = stack.sim.now() + timedelta(days=365)
        with duckdb.connect(str(stack.warehouse_path)) as conn:
            conn.execute(
                "UPDATE lms._sync_state SET cursor = ? WHERE stream IN ('active_lessons', 'answers')",
                [future + timedelta(minutes=10)],
            )
        stack.advance(hours=24)
        later = stack.sync(select=("group:progress",))
        assert _metadata(later, "lms/active_lessons")["rows_fetched"] == 0
        assert _metadata(later, "lms/answers")["rows_fetched"] == 0
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            after = conn.execute(
                "SELECT count(*), sum(hash(user_id, lesson_id, last_date)) FROM lms.active_lessons"
            ).fetchone()
            cursor = conn.execute("SELECT cursor FROM lms._sync_state WHERE stream = 'active_lessons'").fetchone()[0]
        assert after == before
        assert cursor > stack.sim.now()  # a cursor in the future stays there: never moved backwards


@pytest.mark.slow
def test_sync_with_faults_and_page_drift_loses_nothing(tmp_path):
    """Records that drift while a run pages may be read before their change (the next run reads them,
    their new lastDate is in its window); what must never happen is an UNCHANGED record skipped because
    the others shifted under the offset pages: the next run's window would not include it."""
    faults = "error_rate=0.05,rate_limit_every=40,token_ttl=30,drift=0.05,truncate_rate=0.01"
    with local_stack(tmp_path / "data", scale="tiny", faults=faults, page_size=50) as stack:
        full = stack.sync(select=RAW)
        stack.advance(hours=24)
        incremental = stack.sync(select=RAW)
        injected = stack.sim.stats()
        stack.sim.set_faults("")  # the platform settles; one more ordinary run
        settled = stack.sync(select=RAW)
        assert settled.success, settled.error
        assert_warehouse_equals_platform(stack)
        retries = sum(
            _metadata(r, "lms/answers")["retries"] + _metadata(r, "lms/active_lessons")["retries"]
            for r in (full, incremental)
        )
        assert retries > 0, injected  # the faults really happened and were retried


@pytest.mark.slow
def test_a_thirty_day_backfill_is_one_sweep_and_leaves_the_cursor(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=50) as stack:
        assert stack.sync(select=RAW).success
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            cursor_before = conn.execute(
                "SELECT cursor FROM lms._sync_state WHERE stream = 'active_lessons'"
            ).fetchone()[0]
            in_range = conn.execute(
                "SELECT count(*) FROM lms.active_lessons WHERE last_date >= ?", [stack.sim.now() - timedelta(days=30)]
            ).fetchone()[0]
        end = stack.sim.now().date() - timedelta(days=1)
        start = end - timedelta(days=29)
        backfill = stack.sync(select=("group:progress",), backfill_range=(start.isoformat(), end.isoformat()))
        active = _metadata(backfill, "lms/active_lessons")
        assert active["window"].startswith("backfill")
        # One sweep of the range: the pages its records fill (+1 short page), not 30 sweeps of a day each.
        assert active["pages"] <= in_range // 50 + 2
        assert active["requests"] < 30
        assert active["rows_fetched"] >= in_range  # every record updated since the range start
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            cursor_after = conn.execute(
                "SELECT cursor FROM lms._sync_state WHERE stream = 'active_lessons'"
            ).fetchone()[0]
        assert cursor_after == cursor_before
        assert_warehouse_equals_platform(stack)


def _cursors(stack):
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        return dict(conn.execute("SELECT stream, cursor FROM lms._sync_state").fetchall())


@pytest.mark.slow
def test_a_backfill_without_a_range_is_refused_and_a_backfill_never_moves_a_cursor(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", page_size=50) as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=6)  # newer rows: a cursor run now would move the cursors
        cursors = _cursors(stack)
        asked = len(stack.sim.request_log())

        # Launched as the Launchpad prefills it (no range): refused before a run exists, naming what to fill in
        with pytest.raises(DagsterInvalidConfigError, match=r"backfill.*config.*updated_from"):
            stack.run_job("backfill_progress")
        # A run tagged as a backfill some other way (the tag added by hand to an asset's run): refused before any fetch
        with environment(stack.run_env()):
            asset_job = definitions_for(load_settings()).resolve_job_def("__ASSET_JOB")
            tagged = asset_job.execute_in_process(
                instance=DagsterInstance.ephemeral(),
                asset_selection=[AssetKey(["lms", "active_lessons"])],
                tags=BACKFILL_WINDOW,
                raise_on_error=False,
            )
        assert not tagged.success
        failure = next(e for e in tagged.all_events if e.is_step_failure)
        assert NO_RANGE in str(failure.step_failure_data.user_failure_data.description)
        assert len(stack.sim.request_log()) == asked, "a refused backfill asks the platform nothing"
        assert _cursors(stack) == cursors

        # With a range: every row of the progress tables exact, no cursor moved
        end = stack.sim.now().date()
        backfill = stack.sync(
            select=("group:progress",), backfill_range=((end - timedelta(days=3)).isoformat(), end.isoformat())
        )
        assert _metadata(backfill, "lms/active_lessons")["window"].startswith("backfill")
        assert _cursors(stack) == cursors
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            diffs = compare_warehouse(conn, stack.sim, ("active_lessons", "answers", "answer_results"))
        assert all(d.equal for d in diffs), [d.summary() for d in diffs if not d.equal]
