"""Publishing: the snapshot database and the Parquet marts are complete, readable by another process while
the warehouse is held read-write, and swapped whole."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from analytics_world import AS_OF, create_raw_tables, insert, record_load, seed_small_world
from published_helpers import assert_same_raw_tables

from pipeline.analytics import published_files
from pipeline.analytics.build import build_models
from pipeline.analytics.models import AnalyticsProject, load_project
from pipeline.analytics.publish import PublishResult, publish
from pipeline.analytics.summary import mart_summary
from pipeline.analytics.verify import verify_published
from pipeline.warehouse import live_table_rows

READER = r"""
import json, sys, time
from pathlib import Path
import duckdb, pyarrow.parquet as pq

data = Path(sys.argv[1])
report = {"iterations": 0, "errors": [], "progress_rows": [], "parquet_rows": [], "warehouse_open": None}
try:  # the premise: while another process writes the warehouse, even a read-only open fails
    duckdb.connect(str(data / "warehouse.duckdb"), read_only=True).close()
    report["warehouse_open"] = "opened"
except duckdb.Error as error:
    report["warehouse_open"] = str(error)
(data / "reader-ready").touch()
while not (data / "reader-stop").exists():
    try:
        conn = duckdb.connect(str(data / "analytics.duckdb"), read_only=True)
        try:
            progress = conn.execute("SELECT count(*) FROM learner_progress").fetchone()[0]
            funnel = conn.execute("SELECT sum(learners) FROM lesson_funnel").fetchone()[0]
        finally:
            conn.close()
        if funnel != progress:
            report["errors"].append(f"torn snapshot: funnel {funnel} vs progress {progress}")
        report["progress_rows"].append(progress)
        marts = json.loads((data / "marts" / "_manifest.json").read_text())["marts"]
        for name in marts:
            with open(data / "marts" / f"{name}.parquet", "rb") as handle:  # one open: one version of the file
                rows = pq.read_table(handle).num_rows
            if name == "learner_progress":
                report["parquet_rows"].append(rows)
    except Exception as error:
        report["errors"].append(repr(error))
    report["iterations"] += 1
    progress = {"iterations": report["iterations"], "distinct": len(set(report["progress_rows"]))}
    (data / "reader-progress.tmp").write_text(json.dumps(progress))
    (data / "reader-progress.tmp").replace(data / "reader-progress")
    time.sleep(0.01)  # leave the writer a core on a 2-core machine
print(json.dumps(report))
"""


def main_relations(snapshot: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """What analysts see in the snapshot's schema main: name -> BASE TABLE or VIEW."""
    return dict(
        snapshot.execute(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    )


def build_and_publish(conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path) -> int:
    assert {r.status for r in build_models(conn, project, as_of=AS_OF)} <= {"built", "unchanged"}
    publish(conn, project, data_dir)
    return conn.execute("SELECT count(*) FROM analytics.learner_progress").fetchone()[0]


def published_columns(conn: duckdb.DuckDBPyConnection, model: str) -> list[str]:
    """The model's columns but its bookkeeping ones (`_...`): what is published of it."""
    return [r[0] for r in conn.execute(f"DESCRIBE analytics.{model}").fetchall() if not r[0].startswith("_")]


def warehouse_rows(conn: duckdb.DuckDBPyConnection, model: str) -> list[tuple]:
    columns = ", ".join(f'"{c}"' for c in published_columns(conn, model))
    return conn.execute(f"SELECT {columns} FROM analytics.{model} ORDER BY ALL").fetchall()


def published_rows(snapshot: duckdb.DuckDBPyConnection, model: str) -> list[tuple]:
    return snapshot.execute(f"SELECT * FROM main.{model} ORDER BY ALL").fetchall()


def add_learners(conn: duckdb.DuckDBPyConnection, round_: int, count: int = 50) -> None:
    """What a sync does between two builds: new progress records."""
    insert(
        conn,
        "active_lessons",
        [
            {"owner_id": "O1", "user_id": f"R{round_}-{k}", "lesson_id": "L1", "stats_progress_in_percent": 10.0}
            for k in range(count)
        ],
    )


def reader_saw_several_publishes(data_dir: Path) -> bool:
    try:
        progress = json.loads((data_dir / "reader-progress").read_text())
    except FileNotFoundError:
        return False
    return progress["iterations"] >= 10 and progress["distinct"] >= 3


def test_publish_writes_every_model_and_every_mart(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    seed_small_world(warehouse_conn)
    build_and_publish(warehouse_conn, project, data_dir)
    snapshot = duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True)
    try:
        # every model a view over the published files (a staging view over the snapshot's raw tables)
        assert main_relations(snapshot) == {m.name: "VIEW" for m in project.published} | {
            "_builds": "BASE TABLE",
            "_published": "BASE TABLE",
        }
        # the raw tables are there, as the warehouse holds them; the warehouse's schema analytics is not (in a file
        # named analytics.duckdb, `analytics.x` would be ambiguous)
        schemas = {
            r[0] for r in snapshot.execute("SELECT schema_name FROM duckdb_schemas() WHERE NOT internal").fetchall()
        }
        assert "lms" in schemas and "analytics" not in schemas
        assert_same_raw_tables(warehouse_conn, snapshot)
        for model in project.published:
            assert published_rows(snapshot, model.name) == warehouse_rows(warehouse_conn, model.name), model.name
        assert snapshot.execute("SELECT count(*) FROM stg_active_lessons").fetchone()[0] == 6
        for mart in project.marts:
            table = pq.read_table(data_dir / "marts" / f"{mart.name}.parquet")
            assert table.num_rows == len(warehouse_rows(warehouse_conn, mart.name))
            assert table.column_names == published_columns(warehouse_conn, mart.name)
        # an incremental model's bookkeeping (_loaded_at) stays in the warehouse
        assert "_loaded_at" not in published_columns(warehouse_conn, "learner_progress")
        assert "_loaded_at" in [r[0] for r in warehouse_conn.execute("DESCRIBE analytics.learner_progress").fetchall()]
    finally:
        snapshot.close()
    # the snapshot is a copy of the warehouse file, made without this process letting go of the file's lock
    opened = subprocess.run(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; duckdb.connect(sys.argv[1], read_only=True)",
            str(data_dir / "warehouse.duckdb"),
        ],
        capture_output=True,
        text=True,
    )
    assert opened.returncode != 0 and "lock" in opened.stderr.lower()
    manifest = json.loads((data_dir / "marts" / "_manifest.json").read_text())
    version = warehouse_conn.execute("SELECT inputs FROM analytics._builds WHERE model = 'lesson_funnel'").fetchone()[0]
    assert manifest["marts"]["lesson_funnel"] == {"file": "lesson_funnel.parquet", "rows": 3, "version": version}
    problems, rows = verify_published(project, data_dir)
    assert problems == [] and rows["lesson_funnel"] == 3 and rows["learner_progress"] == 6
    assert not list(data_dir.rglob("*.tmp*"))


@pytest.mark.slow
def test_reader_process_queries_through_rebuilds_without_error(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    seed_small_world(warehouse_conn)
    published = [build_and_publish(warehouse_conn, project, data_dir)]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(data_dir)], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (data_dir / "reader-ready").exists():
            assert reader.poll() is None and time.monotonic() < deadline, "the reader did not start"
            time.sleep(0.05)
        round_, give_up = 0, time.monotonic() + 180  # the warehouse stays open read-write here the whole time
        while round_ < 4 or not reader_saw_several_publishes(data_dir):  # on a loaded machine the reader is slow
            assert time.monotonic() < give_up, "the reader made too little progress"
            add_learners(warehouse_conn, round_)
            published.append(build_and_publish(warehouse_conn, project, data_dir))
            round_ += 1
            time.sleep(0.1)
        time.sleep(0.5)  # let the reader see the last publish
    finally:
        (data_dir / "reader-stop").touch()
        out, _ = reader.communicate(timeout=60)
    report = json.loads(out)
    assert "lock" in report["warehouse_open"].lower()
    assert report["errors"] == []
    assert report["iterations"] >= 10
    assert set(report["progress_rows"]) <= set(published)
    assert len(set(report["progress_rows"])) >= 3  # it read across several swaps
    assert set(report["parquet_rows"]) <= set(published)


def test_removed_mart_loses_its_parquet_file(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    build_and_publish(warehouse_conn, project, data_dir)
    manifest_path = data_dir / "marts" / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["marts"]["old_mart"] = {"file": "old_mart.parquet", "rows": 0}
    manifest_path.write_text(json.dumps(manifest))
    (data_dir / "marts" / "old_mart.parquet").write_bytes(b"stale")
    (data_dir / "marts" / "notes.txt").write_text("an analyst's file")
    publish(warehouse_conn, project, data_dir)
    assert not (data_dir / "marts" / "old_mart.parquet").exists()
    assert (data_dir / "marts" / "notes.txt").exists()


def test_verify_reports_a_parquet_file_that_disagrees(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    seed_small_world(warehouse_conn)
    build_and_publish(warehouse_conn, project, data_dir)
    warehouse_conn.execute(
        "COPY (SELECT 1 AS x) TO ? (FORMAT parquet)", [str(data_dir / "marts" / "lesson_funnel.parquet")]
    )
    problems, rows = verify_published(project, data_dir)
    assert problems == [f"{data_dir / 'marts' / 'lesson_funnel.parquet'}: 1 rows but the manifest says 3"]
    assert rows["lesson_funnel"] == 3


def test_publish_leaves_out_a_model_never_built_and_publishes_the_rest(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    """A new model whose first build failed has no table: the others are published, and it is said."""
    others = [name for name in project.models if name != "question_difficulty"]
    assert {r.status for r in build_models(warehouse_conn, project, others, as_of=AS_OF)} == {"built"}
    result = publish(warehouse_conn, project, data_dir)
    assert list(result.left_out) == ["question_difficulty"] and "never built" in result.left_out["question_difficulty"]
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        published = {m.name for m in project.published} - {"question_difficulty"}
        assert published <= set(main_relations(snapshot)) and "question_difficulty" not in main_relations(snapshot)
    assert set(result.parquet) == {m.name for m in project.marts} - {"question_difficulty"}
    problems, _ = verify_published(project, data_dir)
    assert problems == [
        f"{data_dir / 'analytics.duckdb'}: model question_difficulty is missing",
        f"{data_dir / 'marts' / 'question_difficulty.parquet'}: not published",
    ]


def test_demo_summary_reads_the_published_snapshot(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    assert "no analytics published yet" in mart_summary(data_dir)
    seed_small_world(warehouse_conn)
    build_and_publish(warehouse_conn, project, data_dir)
    sections = {part.splitlines()[0]: part.splitlines()[2:] for part in mart_summary(data_dir).split("\n\n")[1:]}
    funnel = sections["Lesson funnel: the five lessons with the most learners"]
    assert funnel[0].split() == ["Sécurité", "4", "1", "1", "1", "1", "33.3", "48.0"]
    badges = sections["Certificates per badge"]
    assert [line.split() for line in badges] == [
        ["Sécurité", "3", "2", "1", "1", "0"],
        ["Excel", "2", "1", "0", "0", "1"],
    ]


def test_a_model_can_stay_out_of_the_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "models"
    (root / "marts").mkdir(parents=True)
    (root / "sources.yml").write_text("sources:\n  - name: lms\n    tables: [{name: numbers}]\n")
    (root / "marts" / "kept.sql").write_text("SELECT 1 AS x FROM lms.numbers")
    (root / "marts" / "internal.sql").write_text("SELECT 2 AS x FROM lms.numbers")
    (root / "marts" / "internal.yml").write_text("models:\n  - name: internal\n    config: {meta: {publish: false}}\n")
    project = load_project(root)
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    conn.execute("CREATE SCHEMA lms; CREATE TABLE lms.numbers AS SELECT 1 AS n")
    assert {r.status for r in build_models(conn, project)} == {"built"}
    publish(conn, project, tmp_path)
    conn.close()
    snapshot = duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True)
    assert set(main_relations(snapshot)) == {"kept", "_builds", "_published"}
    snapshot.close()
    assert sorted(p.name for p in (tmp_path / "marts").glob("*.parquet")) == ["kept.parquet"]


def small_project(root: Path, models: dict[str, str]) -> AnalyticsProject:
    """A project of staging views `models` (name -> SQL) over lms.numbers."""
    (root / "staging").mkdir(parents=True, exist_ok=True)
    (root / "sources.yml").write_text("sources:\n  - name: lms\n    tables: [{name: numbers}]\n")
    for name, sql in models.items():
        (root / "staging" / f"{name}.sql").write_text(sql)
    return load_project(root)


def test_a_view_is_copied_as_built_when_a_view_of_the_file_would_not_read_the_same(tmp_path: Path) -> None:
    """A staging view stays a view (over the snapshot's raw tables) only when its SQL there reads what the
    warehouse's view reads: not when the code changed since it was built, not when it reads another model or the
    build's `as_of`; then its rows are published as a file."""
    root = tmp_path / "models"
    project = small_project(
        root,
        {
            "plain": "SELECT n FROM {{ source('lms', 'numbers') }}",
            "changed": "SELECT n FROM {{ source('lms', 'numbers') }}",
            "on_a_model": "SELECT n * 10 AS n FROM {{ ref('plain') }}",
            "dated": "SELECT n, getvariable('as_of') AS as_of FROM {{ source('lms', 'numbers') }}",
        },
    )
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    conn.execute("CREATE SCHEMA lms; CREATE TABLE lms.numbers AS SELECT 1 AS n")
    assert {r.status for r in build_models(conn, project, as_of=AS_OF)} == {"built"}
    edited = small_project(root, {"changed": "SELECT n + 1 AS n FROM {{ source('lms', 'numbers') }}"})
    publish(conn, edited, tmp_path)
    conn.close()
    snapshot = duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True)
    try:
        views = {name: sql for name, sql in snapshot.execute("SELECT view_name, sql FROM duckdb_views()").fetchall()}
        assert "read_parquet" not in views["plain"] and "lms.numbers" in views["plain"]
        for copied in ("changed", "on_a_model", "dated"):  # the rows the warehouse's build holds, published
            assert "read_parquet" in views[copied], views[copied]
        assert snapshot.execute("SELECT n FROM changed").fetchall() == [(1,)]  # as built, not as the code says now
        assert snapshot.execute("SELECT n FROM on_a_model").fetchall() == [(10,)]
        assert snapshot.execute("SELECT as_of FROM dated").fetchone()[0] == AS_OF
    finally:
        snapshot.close()
    other = duckdb.connect()  # a view binds its raw tables in its own file, whatever the file is attached as
    other.execute(f"ATTACH '{tmp_path / 'analytics.duckdb'}' AS elsewhere (READ_ONLY)")
    other.execute("CREATE SCHEMA lms; CREATE TABLE lms.numbers AS SELECT 99 AS n")
    assert other.execute("SELECT n FROM elsewhere.plain").fetchall() == [(1,)]
    other.close()


def test_an_in_memory_warehouse_publishes_like_a_file(tmp_path: Path) -> None:
    """The snapshot reads files written from the warehouse's rows, never the warehouse's own file."""
    project = small_project(tmp_path / "models", {"plain": "SELECT n FROM {{ source('lms', 'numbers') }}"})
    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA lms; CREATE TABLE lms.numbers AS SELECT 1 AS n")
    assert {r.status for r in build_models(conn, project, as_of=AS_OF)} == {"built"}
    publish(conn, project, tmp_path)
    conn.close()
    with duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True) as snapshot:
        assert snapshot.execute("SELECT n FROM plain").fetchall() == [(1,)]


def test_the_snapshot_is_in_the_storage_format_duckdb_1_4_reads(
    warehouse_conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    data_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A warehouse LessonSync created is in the v1.4.0 format, so is its byte copy, and nothing is said."""
    seed_small_world(warehouse_conn)
    with caplog.at_level(logging.WARNING, logger="lessonsync.analytics"):
        build_and_publish(warehouse_conn, project, data_dir)
    assert caplog.records == []
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        assert storage_version(snapshot) == "v1.4.0+"


def test_a_warehouse_in_a_newer_format_still_publishes_what_duckdb_1_4_reads(
    tmp_path: Path, project: AnalyticsProject, caplog: pytest.LogCaptureFixture
) -> None:
    """A warehouse file created in DuckDB 2's own format: the snapshot is a file of its own, in the v1.4.0 format."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    warehouse = data_dir / "warehouse.duckdb"
    duckdb.connect(str(warehouse), config={"storage_compatibility_version": "v2.0.0"}).close()
    create_raw_tables(warehouse)
    with duckdb.connect(str(warehouse)) as conn:
        assert storage_version(conn) == "v2.0.0+"
        seed_small_world(conn)
        with caplog.at_level(logging.WARNING, logger="lessonsync.analytics"):
            build_and_publish(conn, project, data_dir)
    assert caplog.records == []
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        assert storage_version(snapshot) == "v1.4.0+"


def storage_version(conn: duckdb.DuckDBPyConnection) -> str:
    return conn.execute("SELECT tags FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0][
        "storage_version"
    ]


def written_dirs(result: PublishResult) -> set[str]:
    """Where a publish wrote: `published/<schema>/<relation>` for the snapshot's files, `marts/<mart>.parquet`."""
    return {"/".join(Path(path).parts[:3]) if path.startswith("published/") else path for path in result.written}


def test_a_publish_writes_only_what_changed(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    seed_small_world(warehouse_conn)
    build_models_now = lambda: {r.model.name: r.status for r in build_models(warehouse_conn, project, as_of=AS_OF)}  # noqa: E731
    build_models_now()
    first = publish(warehouse_conn, project, data_dir)
    assert {f"published/main/{m.name}" for m in project.published if m.materialized != "view"} <= written_dirs(first)
    assert {f"marts/{m.name}.parquet" for m in project.marts} <= written_dirs(first)

    assert set(build_models_now().values()) == {"unchanged"}
    assert publish(warehouse_conn, project, data_dir).written == {}  # a new snapshot file, every Parquet file reused

    add_learners(warehouse_conn, 0, count=1)
    statuses = build_models_now()
    rebuilt = {name for name, status in statuses.items() if status == "built"}
    assert rebuilt == {"stg_active_lessons"} | project.downstream_of("stg_active_lessons")
    third = publish(warehouse_conn, project, data_dir)
    tables = {name for name in rebuilt if project.models[name].materialized != "view"}
    marts = {name for name in tables if project.models[name].is_mart}
    assert written_dirs(third) == {"published/lms/active_lessons"} | {f"published/main/{m}" for m in tables} | {
        f"marts/{m}.parquet" for m in marts
    }
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        assert_same_raw_tables(warehouse_conn, snapshot)
        for model in project.published:
            assert published_rows(snapshot, model.name) == warehouse_rows(warehouse_conn, model.name), model.name
    assert verify_published(project, data_dir)[0] == []
    # while a sync holds the warehouse, `lessonsync status` counts the raw tables in the snapshot
    counted = live_table_rows(data_dir / "held-by-a-sync.duckdb", data_dir / "analytics.duckdb")
    assert counted.rows["active_lessons"] == 7 and counted.source.startswith("published snapshot")


def test_a_large_raw_table_is_published_as_a_base_and_the_rows_changed_since(
    warehouse_conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past DELTA_MIN_ROWS, a change writes the rows changed since the table's base (updated, inserted, marked
    deleted), and the snapshot's view reads the base's other rows and those; past DELTA_SHARE, a new base."""
    monkeypatch.setattr(published_files, "DELTA_MIN_ROWS", 0)
    monkeypatch.setattr(published_files, "DELTA_SHARE", 0.5)  # a few rows of a tiny table
    seed_small_world(warehouse_conn)
    build_and_publish(warehouse_conn, project, data_dir)
    at = record_load(warehouse_conn, {"active_lessons": {"updated": 1}, "groups": {"deleted": 1}})
    warehouse_conn.execute(
        "UPDATE lms.active_lessons SET time_spent = 999, last_loaded_at = ? WHERE user_id = 'U4' AND lesson_id = 'L1'",
        [at],
    )
    warehouse_conn.execute("UPDATE lms.groups SET deleted_at = ? WHERE id = 'G3'", [at])  # a group without members
    build_and_publish(warehouse_conn, project, data_dir)
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        views = dict(snapshot.execute("SELECT view_name, sql FROM duckdb_views() WHERE schema_name = 'lms'").fetchall())
        assert ".delta-" in views["active_lessons"] and ".delta-" in views["groups"]
        assert ".delta-" not in views["users"]  # no change: its base alone
        assert_same_raw_tables(warehouse_conn, snapshot)
        assert snapshot.execute("SELECT sum(learners) FROM lesson_funnel").fetchone()[0] == 6
    monkeypatch.setattr(published_files, "DELTA_SHARE", 0.0)
    add_learners(warehouse_conn, 0, count=1)
    build_models(warehouse_conn, project, as_of=AS_OF)
    result = publish(warehouse_conn, project, data_dir)
    written = [p for p in result.written if p.startswith("published/lms/active_lessons/")]
    assert len(written) == 1 and ".delta-" not in written[0]  # a new base
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        assert_same_raw_tables(warehouse_conn, snapshot)


def test_files_no_snapshot_refers_to_stay_for_the_grace_then_go(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path
) -> None:
    seed_small_world(warehouse_conn)
    build_and_publish(warehouse_conn, project, data_dir)
    reader = duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True)  # holds the first snapshot open
    try:
        before = reader.execute("SELECT count(*) FROM learner_progress").fetchone()[0]
        add_learners(warehouse_conn, 0)
        build_and_publish(warehouse_conn, project, data_dir)
        # the previous snapshot's files outlive its replacement: the reader still reads what it opened
        assert reader.execute("SELECT count(*) FROM learner_progress").fetchone()[0] == before
        state = json.loads((data_dir / "published" / "_state.json").read_text())
        assert any(path.startswith("main/learner_progress/") for path in state["retired"])
        result = publish(warehouse_conn, project, data_dir, grace=timedelta(0))
        assert any(path.startswith("main/learner_progress/") for path in result.deleted)
        with pytest.raises(duckdb.IOException):  # past the grace: a reader of the old snapshot must reopen
            reader.execute("SELECT count(*) FROM learner_progress").fetchone()
    finally:
        reader.close()
    assert verify_published(project, data_dir)[0] == []  # every file the current snapshot reads is there
    kept = {str(p.relative_to(data_dir / "published")) for p in (data_dir / "published").rglob("*.parquet")}
    with duckdb.connect(str(data_dir / "analytics.duckdb"), read_only=True) as snapshot:
        sql = " ".join(s for (s,) in snapshot.execute("SELECT sql FROM duckdb_views() WHERE NOT internal").fetchall())
    assert all(path in sql for path in kept)  # nothing else is kept
