"""Overlapped fetches inside the raw sync's one step (pipeline/raw/runner.py): within one run the streams are
fetched at the same time, as the simulator's own request log shows, never with more requests in flight than
LESSONSYNC_CONCURRENCY in total, each committed as its fetch ends, and the warehouse still equals the platform
after a full and an incremental sync."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import duckdb
import psutil
import pytest
from dagster import DagsterEventType, DagsterInstance, EventLogEntry
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.contract.streams import SYNC_STREAMS
from pipeline.raw import runner
from pipeline.source import answers
from pipeline.source.client import PlatformClient
from pipeline.stack import local_stack
from pipeline.warehouse import hooks
from simulator.platform import LoggedRequest

pytestmark = pytest.mark.slow
CONCURRENCY = 3


def stream_of(request: LoggedRequest) -> str | None:
    """Which stream a logged request belongs to (None: the first-page probe, tokens, drift checks)."""
    url = urlsplit(request.path)
    query = parse_qs(url.query)
    if url.path.endswith("/answers"):
        return "answers"
    if url.path == "/v1/active-lessons":  # the probe asks pageSize=1; the answers' drift checks updatedSince
        return None if query.get("pageSize") == ["1"] or "updatedSince" in query else "active_lessons"
    if url.path.startswith("/v1/groups"):
        return "groups"
    if url.path == "/v1/lessons":
        return "lessons"
    return None


def max_overlap_between(log: list[LoggedRequest], first: str, second: str) -> int:
    """How many requests of `second` were in flight at the server while one of `first` was."""
    spans = [r for r in log if stream_of(r) == first]
    others = [r for r in log if stream_of(r) == second]
    return max((sum(1 for o in others if o.arrived < r.answered and r.arrived < o.answered) for r in spans), default=0)


def decode_worker_processes() -> list[int]:
    """This process's decode workers (pipeline/source/decode_workers.py), running or not yet reaped."""
    return [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if "pipeline.source.decode_workers" in " ".join(p.cmdline())
    ]


def sync_holding_the_first_commit(
    stack, seconds: float, *, settle: float = 0.0, instance: DagsterInstance | None = None
):
    """A sync of the raw tables whose active lessons' commit is held until answers requests reach the platform, or
    `seconds`, then `settle` seconds more; and, as a one-item list, whether they had, with the decode worker
    processes running then."""
    at_first_commit: list[tuple[bool, list[int]]] = []

    def answers_asked() -> bool:
        return any(stream_of(r) == "answers" for r in stack.sim.request_log())

    def hold_first_commit(point: str) -> None:
        if point == "parts_written:active_lessons" and not at_first_commit:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not answers_asked():
                time.sleep(0.02)
            time.sleep(settle)
            at_first_commit.append((answers_asked(), decode_worker_processes()))

    hooks.on_point(hold_first_commit)
    try:
        return stack.sync(select=RAW, instance=instance), at_first_commit
    finally:
        hooks.on_point(None)


def materialized_at(instance: DagsterInstance, run_id: str) -> dict[str, float]:
    """When each table of the run was reported materialized (the raw sync reports a stream's tables as it commits)."""
    return {
        record.dagster_event.asset_key.path[-1]: record.timestamp
        for record in instance.all_logs(run_id)
        if record.dagster_event is not None and record.dagster_event.event_type_value == "ASSET_MATERIALIZATION"
    }


def test_streams_are_fetched_together_within_the_limit_and_stay_exact(tmp_path):
    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=25", page_size=20) as stack:
        stack.env["LESSONSYNC_CONCURRENCY"] = str(CONCURRENCY)
        full, at_first_commit = sync_holding_the_first_commit(stack, seconds=20)
        assert full.success, full.error
        assert [asked for asked, _ in at_first_commit] == [True]  # fetched while the active lessons committed
        assert_warehouse_equals_platform(stack)
        log = stack.sim.request_log()
        streams = {stream_of(r) for r in log}
        assert {"active_lessons", "groups", "lessons", "answers"} <= streams
        first = {name: min(r.arrived for r in log if stream_of(r) == name) for name in streams if name}
        last = {name: max(r.answered for r in log if stream_of(r) == name) for name in streams if name}
        # the snapshots did not wait for the active lessons' step: they were asked while it was still paging
        assert first["groups"] < last["active_lessons"] and first["lessons"] < last["active_lessons"]
        assert max_overlap_between(log, "active_lessons", "groups") >= 1
        # one limit for the whole run, not one per stream
        assert 1 < stack.sim.stats()["max_in_flight"] <= CONCURRENCY
        # each stream reports its own requests: together they are every request the run made (the first-page
        # probe and the token exchange counted with the stream that made them)
        reported = {key: meta["requests"] for key, meta in full.materializations.items() if "requests" in meta}
        own = (
            reported["lms/active_lessons"]
            + reported["lms/answers"]
            + reported["lms/groups"]
            + reported["lms/lessons"]
            + reported["lms/categories"]
            + reported["lms/lesson_sessions"]
        )
        assert own == sum(count for route, count in stack.sim.stats()["requests"].items() if " /v1/" in route)

        stack.advance(hours=24)
        incremental = stack.sync(select=RAW)
        assert incremental.success, incremental.error
        assert incremental.materializations["lms/active_lessons"]["window"].startswith("incremental")
        assert_warehouse_equals_platform(stack)
        assert stack.sim.stats()["max_in_flight"] <= CONCURRENCY


def test_a_large_active_lessons_load_commits_before_the_answers_start_and_stays_exact(tmp_path, monkeypatch):
    """Above their declaration's overlap_max_rows the answers are planned from the committed active lessons and
    fetched only after that commit (runner.py: the two would add up in memory), and committed after their last page,
    still exact."""
    answers_stream = SYNC_STREAMS["answers"]
    assert answers_stream.planned is not None
    planned = replace(answers_stream.planned, overlap_max_rows=0)
    monkeypatch.setitem(SYNC_STREAMS, "answers", replace(answers_stream, planned=planned))
    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=5", page_size=20) as stack:
        full, at_first_commit = sync_holding_the_first_commit(stack, seconds=3)
        assert full.success, full.error
        assert [asked for asked, _ in at_first_commit] == [False]
        assert full.materializations["lms/answers"]["rows_fetched"] > 0
        # nor is such a window's first load inserted while fetched (the DuckDB work beside the fetch, in memory)
        assert "rows_inserted_while_fetching" not in full.materializations["lms/answers"]
        assert_warehouse_equals_platform(stack)


def test_no_decode_worker_runs_beside_the_commits_before_the_answers(tmp_path, monkeypatch):
    """The answers fetched while the active lessons commit are decoded on the client's own thread until they are the
    next stream to commit (runner.py): a worker process on top of the commits before was the large full sync's
    memory peak. Here the plan asks for a worker at once (START_AT_RECORDS and START_AT_RECORDS_PER_PAGE 0); none
    runs at the active lessons' commit, with their answers being fetched; the hold is lifted for the answers' own
    commit; the run stays exact."""
    monkeypatch.setattr(answers, "START_AT_RECORDS", 0)
    monkeypatch.setattr(answers, "START_AT_RECORDS_PER_PAGE", 0)
    holds: list[tuple[bool, float]] = []  # the hold's changes, as the client is asked (a spy: the real call runs)
    hold = PlatformClient.hold_decode_workers
    monkeypatch.setattr(
        PlatformClient,
        "hold_decode_workers",
        lambda client, held=True: (holds.append((held, time.time())), hold(client, held))[1],
    )
    instance = DagsterInstance.ephemeral()
    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=25", page_size=20) as stack:
        stack.env["LESSONSYNC_DECODE_PROCESSES"] = "1"
        # a worker the plan started would be a process within a second (it starts in milliseconds)
        full, at_first_commit = sync_holding_the_first_commit(stack, seconds=20, settle=1.0, instance=instance)
        assert full.success, full.error
        assert at_first_commit == [(True, [])]  # the answers were being fetched, with no worker beside the commit
        assert_warehouse_equals_platform(stack)
    # held when the fetch began, through the active lessons' commit, lifted when the answers are the next to commit
    # (a start asked for is made then: test_decode_workers.py)
    reported = materialized_at(instance, full.run_id)
    assert [held for held, _ in holds] == [True, False]
    assert holds[0][1] < reported["active_lessons"] <= holds[1][1] <= reported["answers"]


def test_streams_whose_fetch_has_ended_commit_before_one_still_fetching(tmp_path):
    """While the groups snapshot is still being fetched, the streams whose data has arrived commit first
    (runner.py: the next commit is one whose fetch has ended); the groups commit once their fetch ends. The groups
    fetch is held at its end until five streams committed (or 20 s: then the runner waited for it, before them)."""
    commits: list[str] = []
    ended: set[str] = set()

    def wait_for(condition, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not condition():
            time.sleep(0.02)

    def hold_groups(point: str) -> None:
        if point.startswith("fetch_ended:"):
            ended.add(point.removeprefix("fetch_ended:"))
        if point == "fetch_ended:groups":
            # until the active lessons, answers, categories, lesson sessions and lessons committed (had the runner waited
            # for the groups first, fewer would, and the hold would end at 20 s)
            wait_for(lambda: len(commits) >= 5)
        elif point == "committed":
            commits.append(point)
            if len(commits) == 1:  # the first commit: the other snapshots arrive before the next one is picked
                wait_for(lambda: {"categories", "lesson_sessions", "lessons"} <= ended)

    instance = DagsterInstance.ephemeral()
    with local_stack(tmp_path / "data", scale="tiny", page_size=20) as stack:
        hooks.on_point(hold_groups)
        try:
            full = stack.sync(select=("key:lms/* and not key:lms/certificate*",), instance=instance)
        finally:
            hooks.on_point(None)
        assert full.success, full.error
        reported = materialized_at(instance, full.run_id)
        assert reported["groups"] > max(reported["lessons"], reported["lesson_sessions"], reported["categories"])
        certificates = stack.sync(select=("key:lms/certificate*",))
        assert certificates.success, certificates.error
        assert_warehouse_equals_platform(stack)


def test_a_first_load_of_the_answers_goes_in_while_fetched_and_stays_exact(tmp_path, monkeypatch):
    """A full sync inserts the answers' parts into their empty tables while their fetch runs (early_insert.py),
    here parts of 300 rows. The answers' fetch is held at its end until that step has inserted a part, so the step
    finds it running. The UI shows how many rows went in early; the warehouse equals the platform, and so it does
    after an incremental sync, which is no first load."""
    monkeypatch.setattr(runner, "EARLY_PART_ROWS", 300)
    inserted: list[str] = []
    changed = threading.Condition()

    def hold_answers_parts(point: str) -> None:
        with changed:
            if point.startswith("early_inserted:"):
                inserted.append(point)
                changed.notify_all()
            elif point == "fetch_ended:answers":  # in the fetch's thread, before its step can see it ended
                changed.wait_for(lambda: inserted, timeout=30)

    with local_stack(tmp_path / "data", scale="tiny", faults="latency_ms=5", page_size=20) as stack:
        hooks.on_point(hold_answers_parts)
        try:
            full = stack.sync(select=RAW)
        finally:
            hooks.on_point(None)
        assert full.success, full.error
        assert inserted
        for table in ("answers", "answer_results"):  # every part but the last one closed went in early
            meta = full.materializations[f"lms/{table}"]
            assert 0 < meta["rows_inserted"] - meta["rows_inserted_while_fetching"] <= 300 < meta["rows_inserted"]
            assert meta["rows_inserted"] == meta["rows_fetched"]
        assert_warehouse_equals_platform(stack)

        stack.advance(hours=24)
        incremental = stack.sync(select=RAW)
        assert incremental.success, incremental.error
        assert "rows_inserted_while_fetching" not in incremental.materializations["lms/answers"]
        assert_warehouse_equals_platform(stack)


def test_a_streams_checks_run_beside_the_next_commit_and_every_check_is_reported(tmp_path):
    """The checks of a stream nothing is planned from run on a thread of their own (pipeline/defs/raw/checking.py):
    the answers' checks are held at their start until the groups have committed, the groups' fetch at its end until
    those checks have begun, so the groups commit after the answers and while their checks wait. Run on the step's
    thread, the checks would hold that commit back, and their hold would end at 30 s, said in `waited`."""
    answers_checking, groups_written, groups_committed = threading.Event(), threading.Event(), threading.Event()
    waited: list[str] = []

    def checks_beside_the_groups_commit(point: str) -> None:
        if point == "raw_checks:answers":
            answers_checking.set()
            if not groups_committed.wait(30):
                waited.append("the groups did not commit while the answers' checks were held")
        elif point == "fetch_ended:groups":
            answers_checking.wait(30)
        elif point == "parts_written:groups":
            groups_written.set()
        elif point == "committed" and groups_written.is_set():
            groups_committed.set()

    instance = DagsterInstance.ephemeral()
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        hooks.on_point(checks_beside_the_groups_commit)
        try:
            report = stack.sync(select=RAW, instance=instance)
        finally:
            hooks.on_point(None)
        assert report.success, report.error
        assert answers_checking.is_set() and groups_committed.is_set()
        assert waited == []
        planned = instance.all_logs(report.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED)
        evaluated = instance.all_logs(report.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
        assert len(planned) > 20
        # a first sync changes every table: every planned check is evaluated, once, and passes
        assert sorted(check_key(e) for e in evaluated) == sorted(check_key(e) for e in planned)
        assert report.failed_checks == []
        assert_warehouse_equals_platform(stack)


def check_key(record: EventLogEntry) -> str:
    event = record.dagster_event
    assert event is not None
    data = event.event_specific_data  # a check's planned evaluation, or its evaluation
    return f"{data.asset_key.to_user_string()}:{data.check_name}"


def test_a_failed_blocking_check_keeps_the_stream_planned_from_its_table_out_of_the_run(tmp_path):
    """The answers are planned from the active lessons and fetched while those commit; when the active lessons'
    blocking key check fails, the answers are not committed in that run (their rows and cursor stay as they were),
    and once the bad row is gone the next sync loads them, exactly."""
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)

        def answers_state() -> tuple[object, ...]:
            with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
                return conn.execute(
                    "SELECT (SELECT count(*) FROM lms.answers), (SELECT max(last_loaded_at) FROM lms.answers), "
                    "(SELECT count(*) FROM lms.answer_results)"
                ).fetchall()[0]

        before = answers_state()
        with duckdb.connect(str(stack.warehouse_path)) as conn:
            # a second row for the key of the oldest lesson, as if this run had loaded it (no index refuses it:
            # docs/warehouse.md); the next sync does not load that key, so only the check meets the duplicate
            conn.execute(
                "INSERT INTO lms.active_lessons SELECT * REPLACE (TIMESTAMPTZ '2100-01-01 00:00:00+00' AS "
                "last_loaded_at) FROM lms.active_lessons ORDER BY last_date, user_id, lesson_id LIMIT 1"
            )
        blocked = stack.sync(select=RAW)
        assert "lms/active_lessons:key_unique_not_null" in blocked.failed_checks
        assert "lms/active_lessons" in blocked.materializations
        assert "lms/answers" not in blocked.materializations
        assert answers_state() == before

        with duckdb.connect(str(stack.warehouse_path)) as conn:
            conn.execute("DELETE FROM lms.active_lessons WHERE last_loaded_at = TIMESTAMPTZ '2100-01-01 00:00:00+00'")
        healed = stack.sync(select=RAW)
        assert healed.success, healed.error
        assert "lms/answers" in healed.materializations and healed.failed_checks == []
        assert answers_state() != before
        assert_warehouse_equals_platform(stack)
