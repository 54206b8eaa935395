"""Benchmark of the analyst models (not a test): build time of every model and of publishing, at a scale, then
what a run costs when nothing changed and after a 1% change, as a share of the full build and publish.

By default the `lms` tables are created by the warehouse layer's own DDL and filled in bulk with synthetic
rows shaped like the simulator's scale (large: 1,000,000 active lessons, ~10,000,000 answers, ~13,000,000
answer results, 60,000 users in 1,000 groups, 2,000 lessons). With --data-dir, an existing synced data
directory is used instead (its warehouse is copied first, so it is left untouched).

    .venv/bin/python bench/analytics_bench.py --scale large
    .venv/bin/python bench/analytics_bench.py --data-dir data      # a warehouse synced by `lessonsync sync`
    .venv/bin/python bench/analytics_bench.py --scale large --work-dir /tmp/abench   # keep the data for reruns

Reports the build time per model (with its data tests), the total, publishing (snapshot + Parquet), file
sizes and the peak RSS of the process that builds (a fresh child: DuckDB runs in it), and writes
bench/results/analytics_<scale>.json. Then, in the same process: models + publish again with nothing changed, and
after a 1% change committed as one load would commit it (1% of the progress records moved on, each with a new
exit-quiz attempt: its answers and their results), each as a share of the full build + publish (`--no-change-runs`
skips both). The synthetic rows carry load times and a load record, as synced rows do, so that the models and the
publish see which tables changed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import created_directory, run_measured  # noqa: E402
from pipeline.analytics.build import build_models  # noqa: E402
from pipeline.analytics.models import AnalyticsProject, load_project  # noqa: E402
from pipeline.analytics.publish import publish  # noqa: E402
from pipeline.contract.tables import TABLES  # noqa: E402
from pipeline.warehouse import Warehouse  # noqa: E402

RESULTS = ROOT / "bench" / "results"
SCALES = {  # users, lessons, active lessons, groups, sessions (the simulator's profiles)
    "tiny": (48, 12, 300, 20, 8),
    "small": (1_500, 120, 20_000, 60, 80),
    "medium": (12_000, 600, 200_000, 250, 300),
    "large": (60_000, 2_000, 1_000_000, 1_000, 1_000),
}
T0 = "TIMESTAMPTZ '2026-05-01 00:00:00+00'"
CHUNK = 100_000  # active lessons per bulk statement of the answer tables
ANSWER_ROWS = (
    "FROM range({lo}, {hi}) t(i), (SELECT 'exit' AS quiz, range AS attempt FROM range(1, 4) UNION ALL "
    "SELECT 'entry', 0) a, range(8) r(q) WHERE i % 5 <> 0 AND q < 4 + i % 5 "
    "AND (a.quiz = 'exit' AND a.attempt <= 1 + i % 3 OR a.quiz = 'entry' AND i % 2 = 0)"
)
# Every statement is one bulk INSERT ... SELECT over range(): {users} {lessons} {n} {groups} {sessions}.
FILL = [
    "INSERT INTO lms.lessons (id, title, status, visibility, summary) SELECT 'L' || range, 'Lesson ' || range, "
    "'online', 'public', 's' FROM range({lessons})",
    "INSERT INTO lms.lesson_questions (lesson_id, notion_index, quiz, question_index, question_id, question_title, "
    "question_type) SELECT 'L' || l, 0, q.quiz, q.k, 'Q' || l || '-' || q.quiz || q.k, 'Question ' || q.k, 'simple' "
    "FROM range({lessons}) t(l), (SELECT * FROM (VALUES ('entry'), ('exit')) v(quiz), range(10) r(k)) q",
    "INSERT INTO lms.users (id, login, email, firstname, lastname, alias, locale, points) SELECT 'U' || range, "
    "'u' || range, 'u' || range || '@x', 'F', 'L', 'A', 'fr', 0 FROM range({users})",
    "INSERT INTO lms.groups (id, title, disabled) SELECT 'G' || range, 'Group ' || range, range % 50 = 0 "
    "FROM range({groups})",
    "INSERT INTO lms.group_members (group_id, user_id) SELECT DISTINCT 'G' || ((u * 7 + k * 13) % {groups}), "
    "'U' || u FROM range({users}) t(u), range(2) r(k)",
    # (user, lesson) pairs are unique: i = u + users * k, lesson = (97 k + u) mod lessons, k < lessons / 97
    "INSERT INTO lms.active_lessons (owner_id, user_id, lesson_id, title, stats_progress_in_percent, stats_success, "
    "achieved, score, time_spent, start_date, last_date) SELECT 'O', 'U' || (i % {users}), "
    "'L' || ((97 * (i // {users}) + i % {users}) % {lessons}), 'Lesson', "
    "CASE WHEN i % 5 = 0 THEN 0 WHEN i % 3 = 0 THEN 100 ELSE i % 95 + 1 END, i % 3 = 0 AND i % 2 = 0, "
    "i % 3 = 0 AND i % 2 = 0, i % 101, i % 3600, {t0} + to_minutes(i % 250000), "
    "{t0} + to_minutes(i % 250000 + i % 5000) FROM range({n}) t(i)",
    # answered (4 in 5): attempts 1..3 of the exit quiz (4..8 questions), an entry quiz for half of them;
    # one result per answer, two for every fourth question. Filled in chunks of active lessons [lo, hi).
    "INSERT INTO lms.answers (active_lesson_id, user_id, lesson_id, quiz_type, attempt_index, question_id, "
    "question_title, last_date, is_valid, validation_feedback_status) SELECT 'AL' || i, 'U' || (i % {users}), "
    "'L' || ((97 * (i // {users}) + i % {users}) % {lessons}), a.quiz, a.attempt, "
    "'Q' || ((97 * (i // {users}) + i % {users}) % {lessons}) || '-' || a.quiz || q, 'Question ' || q, "
    "{t0} + to_minutes(i % 250000 + a.attempt * 60), (i + q + a.attempt) % 3 <> 0, "
    "CASE WHEN q = 3 THEN (['valid', 'invalid', 'pending'])[1 + (i + a.attempt) % 3] END " + ANSWER_ROWS,
    "INSERT INTO lms.answer_results (active_lesson_id, quiz_type, attempt_index, question_id, result_index, type, "
    "value_text, label_name) SELECT 'AL' || i, a.quiz, a.attempt, "
    "'Q' || ((97 * (i // {users}) + i % {users}) % {lessons}) || '-' || a.quiz || q, k, 'choice-ref', 'c' || k, "
    "'Choix' " + ANSWER_ROWS.replace("range(8) r(q) ", "range(8) r(q), range(2) s(k) ") + " AND (k = 0 OR q % 4 = 0)",
    "INSERT INTO lms.lesson_sessions (id, lesson_id, title, status, quotas_type, quotas_min, quotas_max, presenters, "
    "on_site, is_live) SELECT 'S' || range, 'L' || (range % {lessons}), 'Session', 'online', "
    "(['max', 'min-max', 'none'])[1 + range % 3], 3, 20, [], true, false FROM range({sessions})",
    "INSERT INTO lms.lesson_session_registrations (session_id, user_id, status, attendance) SELECT 'S' || s, "
    "'U' || ((s * 31 + k) % {users}), (['approved', 'waiting-list', 'rejected', 'pending-validation'])[1 + k % 4], "
    "(['attended', 'absent', 'none'])[1 + (s + k) % 3] FROM range({sessions}) t(s), range(12) r(k)",
    "INSERT INTO lms.certificates (id, user_id, badge_id, rule_data_name, creation_date, expires, disabled, state, "
    "last_event_id, last_event_type, last_received_at, first_loaded_at, last_loaded_at) SELECT 'C' || range, "
    "'U' || (range % {users}), 'B' || (range % 200), 'Badge', {t0} + to_hours(range % 4000), "
    "{t0} + to_hours(range % 9000), range % 97 = 0, 'completed', 'E' || range, 'certificate_completed', {t0}, "
    "{t0}, {t0} FROM range({n} // 20)",
    "INSERT INTO lms.certificate_events (event_id, event_type, received_at, inbox_id, sequence, id, "
    "first_loaded_at, last_loaded_at) SELECT 'E' || range, 'certificate_completed', {t0}, 'I', range, "
    "'C' || range, {t0}, {t0} FROM range({n} // 20)",
]


def synthetic_warehouse(data_dir: Path, scale: str) -> Warehouse:
    """The lms tables (the warehouse's own DDL, primary keys included) filled in bulk. Filling uses a larger
    memory limit than the build: it maintains the primary-key indexes of 10M-row inserts."""
    users, lessons, n, groups, sessions = SCALES[scale]
    filler = Warehouse(data_dir / "warehouse.duckdb", data_dir / "lake", memory_limit="8GB")
    filler.ensure_tables(TABLES.values())  # certificate tables included
    with filler.connect() as conn:
        for statement in FILL:
            chunks = [(lo, min(lo + CHUNK, n)) for lo in range(0, n, CHUNK)] if "{lo}" in statement else [(0, 0)]
            for lo, hi in chunks:
                conn.execute(
                    statement.format(
                        users=users, lessons=lessons, n=n, groups=groups, sessions=sessions, t0=T0, lo=lo, hi=hi
                    )
                )
        stamp_as_loaded(conn)
        conn.execute("CHECKPOINT")
    return Warehouse(data_dir / "warehouse.duckdb", data_dir / "lake")  # the build runs with the defaults


def stamp_as_loaded(conn: duckdb.DuckDBPyConnection) -> None:
    """What a first sync leaves besides the rows: their load time, and the load's record in lms._load_runs (its
    counts move each table's content version). Idempotent: a warehouse kept from before is stamped once."""
    if conn.execute("SELECT count(*) FROM lms._load_runs").fetchone()[0]:
        return
    tables = [name for name, _ in data_tables(conn)]
    counts = {}
    for name in tables:
        conn.execute(f'UPDATE lms."{name}" SET first_loaded_at = {T0}, last_loaded_at = {T0}')
        counts[name] = {"inserted": conn.execute(f'SELECT count(*) FROM lms."{name}"').fetchone()[0]}
    record_load(conn, counts, T0)


def record_load(conn: duckdb.DuckDBPyConnection, counts: dict[str, dict[str, int]], committed_at: str) -> None:
    seq = conn.execute("SELECT coalesce(max(load_seq), 0) + 1 FROM lms._load_runs").fetchone()[0]
    conn.execute(
        "INSERT INTO lms._load_runs (load_seq, load_id, stream, run_id, started_at, committed_at, complete_snapshots, "
        f"tables, stats) VALUES (?, ?, 'bench', 'bench', {committed_at}, {committed_at}, [], ?, '{{}}')",
        [seq, f"bench-{seq}-{uuid.uuid4().hex[:8]}", json.dumps(counts)],
    )


def data_tables(conn: duckdb.DuckDBPyConnection) -> list[tuple[str, int]]:
    return conn.execute(
        "SELECT table_name, estimated_size FROM duckdb_tables() WHERE schema_name = 'lms' "
        "AND NOT starts_with(table_name, '_') ORDER BY table_name"
    ).fetchall()


T1 = "TIMESTAMPTZ '2026-05-02 00:00:00+00'"  # when the 1% change is loaded
# 1% of the progress records (spread over every user and lesson) move on, each with a new exit-quiz attempt (9):
# the answers of its attempt 1 again, and their results, loaded at T1 by one load.
CHANGED_PAIRS = "SELECT user_id, lesson_id FROM lms.active_lessons WHERE hash(user_id, lesson_id) % 100 = 0"
ONE_PERCENT_CHANGE = {
    "active_lessons": (
        "UPDATE lms.active_lessons SET time_spent = time_spent + 60, stats_progress_in_percent = "
        f"least(100, stats_progress_in_percent + 5), last_date = {T1}, last_loaded_at = {T1} "
        f"WHERE (user_id, lesson_id) IN ({CHANGED_PAIRS})"
    ),
    "answers": (
        f"INSERT INTO lms.answers SELECT * REPLACE (9 AS attempt_index, {T1} AS last_date, {T1} AS first_loaded_at, "
        f"{T1} AS last_loaded_at) FROM lms.answers WHERE quiz_type = 'exit' AND attempt_index = 1 "
        f"AND (user_id, lesson_id) IN ({CHANGED_PAIRS})"
    ),
    "answer_results": (
        f"INSERT INTO lms.answer_results SELECT r.* REPLACE (9 AS attempt_index, {T1} AS first_loaded_at, "
        f"{T1} AS last_loaded_at) FROM lms.answer_results AS r WHERE r.quiz_type = 'exit' AND r.attempt_index = 1 "
        "AND r.active_lesson_id IN (SELECT DISTINCT active_lesson_id FROM lms.answers WHERE attempt_index = 9)"
    ),
}


def one_percent_change(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The 1% change, committed in one transaction with its load record; returns the rows each statement wrote."""
    conn.execute("BEGIN TRANSACTION")
    written = {}
    for table, statement in ONE_PERCENT_CHANGE.items():
        written[table] = conn.execute(statement).fetchone()[0]
    kinds = {"active_lessons": "updated", "answers": "inserted", "answer_results": "inserted"}
    record_load(conn, {table: {kinds[table]: rows} for table, rows in written.items()}, T1)
    conn.execute("COMMIT")
    return written


def counts(warehouse: Warehouse) -> dict[str, int]:
    with warehouse.connect() as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'lms' AND NOT starts_with(table_name, '_')"
            ).fetchall()
        ]
        return {name: conn.execute(f'SELECT count(*) FROM lms."{name}"').fetchone()[0] for name in sorted(names)}


def run(warehouse: Warehouse, data_dir: Path, changes: bool) -> dict[str, object]:
    project = load_project()
    with warehouse.connect() as conn:
        stamp_as_loaded(conn)
        started = time.perf_counter()
        results = list(build_models(conn, project, as_of=datetime.now(UTC), full_refresh=True))
        build_seconds = time.perf_counter() - started
        failed = [r.error for r in results if r.status != "built"]
        published = publish(conn, project, data_dir, rewrite=True)
        report: dict[str, object] = {
            "build_seconds": round(build_seconds, 2),
            "publish_seconds": round(published.seconds, 2),
            "publish_seconds_by_table": published.seconds_by_table,
            "models": {
                r.model.name: {"seconds": round(r.seconds, 2), "rows": r.rows, "materialized": r.model.materialized}
                for r in results
            },
            "failed": failed,
            "snapshot_mib": round(published.snapshot.stat().st_size / 2**20, 1),
            "published_mib": round(sum(published.written.values()) / 2**20, 1),
            "parquet_mib": round(sum(p.stat().st_size for p in published.parquet.values()) / 2**20, 1),
        }
        if changes:
            full = build_seconds + published.seconds
            report["no_change"] = again(conn, project, data_dir, full)
            report["one_percent_rows"] = one_percent_change(conn)
            report["one_percent"] = again(conn, project, data_dir, full)
            report["failed"] = failed + report["no_change"]["failed"] + report["one_percent"]["failed"]
    return report


def again(conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path, full: float) -> dict[str, Any]:
    """Models + publish as a run does them (unchanged models skipped, changed files only), timed."""
    started = time.perf_counter()
    results = list(build_models(conn, project, as_of=datetime.now(UTC)))
    build_seconds = time.perf_counter() - started
    published = publish(conn, project, data_dir)
    rebuilt = {r.model.name: round(r.seconds, 2) for r in results if r.status == "built"}
    return {
        "build_seconds": round(build_seconds, 2),
        "publish_seconds": round(published.seconds, 2),
        "share_of_full": round((build_seconds + published.seconds) / full, 3),
        "rebuilt": rebuilt,
        "incremental": {r.model.name: r.replaced for r in results if r.replaced is not None},
        "written_mib": round(sum(published.written.values()) / 2**20, 1),
        "failed": [r.error for r in results if r.status in ("failed", "skipped")],
    }


def measure(data_dir: Path, changes: bool) -> dict[str, object]:
    """Build and publish in a fresh child process, so that its peak RSS is the build's alone."""
    command = [sys.executable, __file__, "--measure", str(data_dir)] + ([] if changes else ["--no-change-runs"])
    child = run_measured(command)
    if child.returncode != 0:
        raise SystemExit(f"the measuring process failed:\n{child.stderr_tail}")
    report: dict[str, object] = json.loads(child.stdout)
    report["peak_rss_mib"] = child.peak_rss_mib
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=SCALES, default="large")
    parser.add_argument("--data-dir", type=Path, help="use this synced data directory (copied) instead")
    parser.add_argument(
        "--work-dir", type=created_directory, help="keep the synthetic warehouse here and reuse it next time"
    )
    parser.add_argument("--no-change-runs", action="store_true", help="measure the full build and publish only")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    changes = not args.no_change_runs
    if args.measure:
        warehouse = Warehouse(args.measure / "warehouse.duckdb", args.measure / "lake")
        print(json.dumps(run(warehouse, args.measure, changes)))
        return 0
    with tempfile.TemporaryDirectory(prefix="analytics-bench-") as tmp:
        data_dir = Path(tmp)
        started = time.perf_counter()
        if args.data_dir:
            shutil.copy2(args.data_dir / "warehouse.duckdb", data_dir / "warehouse.duckdb")
            label = "synced"
        else:
            label = args.scale
            kept = args.work_dir / f"warehouse-{label}.duckdb" if args.work_dir else None
            if kept and kept.exists():
                shutil.copy2(kept, data_dir / "warehouse.duckdb")
            else:
                synthetic_warehouse(data_dir, args.scale)
                if kept:
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(data_dir / "warehouse.duckdb", kept)
        warehouse = Warehouse(data_dir / "warehouse.duckdb", data_dir / "lake")
        report = {
            "scale": label,
            "prepare_seconds": round(time.perf_counter() - started, 1),
            "tables": counts(warehouse),
            **measure(data_dir, changes),
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"analytics_{label}.json").write_text(json.dumps(report, indent=2) + "\n")
    slowest = sorted(report["models"].items(), key=lambda kv: -kv[1]["seconds"])[:6]
    print(f"scale {label}: lms rows {report['tables']}")
    print(
        f"build of {len(report['models'])} models (with their tests): {report['build_seconds']} s; "
        f"publish: {report['publish_seconds']} s; snapshot {report['snapshot_mib']} MiB, published files "
        f"{report['published_mib']} MiB, Parquet marts {report['parquet_mib']} MiB; peak RSS of the runs "
        f"{report['peak_rss_mib']} MiB"
    )
    print("slowest: " + ", ".join(f"{name} {m['seconds']} s" for name, m in slowest))
    for kind in ("no_change", "one_percent"):
        if kind in report:
            again_ = report[kind]
            print(
                f"{kind}: models {again_['build_seconds']} s + publish {again_['publish_seconds']} s = "
                f"{100 * again_['share_of_full']:.0f}% of the full build + publish; rebuilt {again_['rebuilt']}; "
                f"incremental {again_['incremental']}; written {again_['written_mib']} MiB"
            )
    if report["failed"]:
        print("FAILED: " + " | ".join(report["failed"]))
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
