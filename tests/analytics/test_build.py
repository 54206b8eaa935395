"""Building: atomic replacement under a concurrent reader, failing tests keep the previous table and skip
what is downstream, SQL errors name the file."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from analytics_world import AS_OF, record_load, seed_small_world

from pipeline.analytics.build import BUILD_PREFIX, build_models, models_built_ahead
from pipeline.analytics.models import AnalyticsProject, load_project

ROWS = {1: 300_000, 2: 200_000}  # generation -> rows of that generation's build


def tiny_project(tmp_path: Path, sql: str = "select n, gen from {{ source('lms', 'numbers') }}") -> AnalyticsProject:
    root = tmp_path / "models"
    (root / "marts").mkdir(parents=True, exist_ok=True)
    (root / "sources.yml").write_text("sources:\n  - name: lms\n    tables: [{name: numbers}]\n")
    (root / "marts" / "big.sql").write_text(sql)
    return load_project(root)


def fill(conn: duckdb.DuckDBPyConnection, generation: int) -> None:
    conn.execute("BEGIN TRANSACTION")
    conn.execute("DELETE FROM lms.numbers")
    conn.execute("INSERT INTO lms.numbers SELECT range, ? FROM range(?)", [generation, ROWS[generation]])
    conn.execute("COMMIT")


class Reader(threading.Thread):
    """Queries analytics.big over its own connection as fast as it can, recording what it sees."""

    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        super().__init__(daemon=True)
        self.cursor = conn.cursor()
        self.seen: Counter[tuple] = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                row = self.cursor.execute("SELECT count(*), min(gen), max(gen) FROM analytics.big").fetchone()
                self.seen[row] += 1
            except duckdb.Error as error:
                self.seen[("error", type(error).__name__)] += 1


def run_reader_during(conn: duckdb.DuckDBPyConnection, rebuild, rounds: int, until=lambda seen: False) -> Counter:
    reader = Reader(conn)
    reader.start()
    try:
        for round_ in range(rounds):
            rebuild(2 if round_ % 2 == 0 else 1)
            if until(reader.seen):
                break
    finally:
        reader.stop.set()
        reader.join(timeout=30)
    return reader.seen


@pytest.fixture
def numbers_db(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    conn = duckdb.connect(str(tmp_path / "warehouse.duckdb"))
    conn.execute("CREATE SCHEMA lms; CREATE TABLE lms.numbers (n BIGINT, gen INTEGER)")
    fill(conn, 1)
    yield conn
    conn.close()


def test_reader_sees_old_or_new_table_never_partial(numbers_db: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    project = tiny_project(tmp_path)
    assert [r.status for r in build_models(numbers_db, project)] == ["built"]

    def rebuild(generation: int) -> None:
        fill(numbers_db, generation)  # by hand, not a load: no version moves, so the build is forced
        assert [r.status for r in build_models(numbers_db, project, full_refresh=True)] == ["built"]

    seen = run_reader_during(numbers_db, rebuild, rounds=12)
    whole = {(ROWS[g], g, g) for g in ROWS}
    assert set(seen) <= whole, f"the reader saw a missing or partial table: {seen}"
    assert set(seen) == whole  # it did read across the swaps: both generations observed


def test_the_reader_would_catch_a_non_atomic_replacement(numbers_db: duckdb.DuckDBPyConnection) -> None:
    """Control: the same reader against drop-then-refill does see a missing or partial table."""
    numbers_db.execute("CREATE SCHEMA analytics; CREATE TABLE analytics.big AS SELECT * FROM lms.numbers")

    def naive_rebuild(generation: int) -> None:
        numbers_db.execute("DROP TABLE analytics.big")
        numbers_db.execute(
            "CREATE TABLE analytics.big AS SELECT n, ? AS gen FROM lms.numbers WHERE n % 2 = 0", [generation]
        )
        numbers_db.execute("INSERT INTO analytics.big SELECT n, ? FROM lms.numbers WHERE n % 2 = 1", [generation])

    whole = {(ROWS[1], 1, 1), (ROWS[1], 2, 2)}
    seen = run_reader_during(numbers_db, naive_rebuild, rounds=300, until=lambda seen: set(seen) - whole)
    assert set(seen) - whole, seen


@pytest.fixture
def small_built(warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject) -> duckdb.DuckDBPyConnection:
    seed_small_world(warehouse_conn)
    assert {r.status for r in build_models(warehouse_conn, project, as_of=AS_OF)} == {"built"}
    return warehouse_conn


def count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM analytics.{table}").fetchone()[0]


def test_failing_test_keeps_previous_table_and_skips_downstream(
    small_built: duckdb.DuckDBPyConnection, project: AnalyticsProject
) -> None:
    before = count(small_built, "session_attendance")
    small_built.execute("UPDATE lms.lesson_sessions SET status = 'archived' WHERE id = 'S3'")
    small_built.execute(
        "INSERT INTO lms.lesson_sessions (id, presenters, on_site, is_live) VALUES ('S4', [], false, false)"
    )
    record_load(small_built, {"lesson_sessions": {"inserted": 1, "updated": 1}})
    results = {r.model.name: r for r in build_models(small_built, project, as_of=AS_OF)}

    failed = results["stg_lesson_sessions"]
    assert failed.status == "failed"
    outcome = next(o for o in failed.outcomes if not o.passed)
    assert outcome.test.name == "accepted_values__session_status" and outcome.sample == ["archived"]
    assert "accepted_values__session_status" in failed.error and "archived" in failed.error
    assert results["session_attendance"].status == "skipped"
    assert "upstream model(s) failed: stg_lesson_sessions" in results["session_attendance"].error
    assert count(small_built, "session_attendance") == before  # the new session S4 did not reach it
    assert results["lesson_funnel"].status == "unchanged"  # unrelated models are not blocked (nor changed)


def test_warn_severity_reports_without_blocking(tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection) -> None:
    project = tiny_project(tmp_path)
    (tmp_path / "models" / "marts" / "big.yml").write_text(
        "models:\n  - name: big\n    columns:\n      - name: gen\n        data_tests:\n"
        "          - accepted_values: {arguments: {values: [2]}, config: {severity: warn}}\n"
    )
    project = load_project(tmp_path / "models")
    (result,) = build_models(numbers_db, project)
    assert result.status == "built"
    (outcome,) = result.outcomes
    assert not outcome.passed and outcome.failing_rows == ROWS[1] and outcome.sample == [1]


def test_sql_error_names_the_file_and_keeps_previous_table(
    tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection
) -> None:
    project = tiny_project(tmp_path)
    list(build_models(numbers_db, project))
    broken = tiny_project(tmp_path, "select n, no_such_column from {{ source('lms', 'numbers') }}")
    (result,) = build_models(numbers_db, broken)
    assert result.status == "failed"
    assert str(broken.models["big"].sql_path) in result.error and "no_such_column" in result.error
    assert count(numbers_db, "big") == ROWS[1]
    assert not _leftovers(numbers_db)


def test_documented_column_missing_from_the_select(tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection) -> None:
    tiny_project(tmp_path)
    (tmp_path / "models" / "marts" / "big.yml").write_text(
        "models:\n  - name: big\n    columns: [{name: generation, description: typo}]\n"
    )
    (result,) = build_models(numbers_db, load_project(tmp_path / "models"))
    assert result.status == "failed"
    assert "big.yml" in result.error and "['generation']" in result.error
    assert not _leftovers(numbers_db)


def test_leftover_build_of_a_killed_run_is_replaced(tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection) -> None:
    numbers_db.execute(f"CREATE SCHEMA analytics; CREATE TABLE analytics.{BUILD_PREFIX}big AS SELECT 1 AS half_done")
    (result,) = build_models(numbers_db, tiny_project(tmp_path))
    assert result.status == "built" and result.rows == ROWS[1]
    assert not _leftovers(numbers_db)


def test_materialization_can_change_between_builds(tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection) -> None:
    project = tiny_project(tmp_path)
    list(build_models(numbers_db, project))
    (tmp_path / "models" / "marts" / "big.yml").write_text("models:\n  - name: big\n    config: {materialized: view}\n")
    (result,) = build_models(numbers_db, load_project(tmp_path / "models"))
    assert result.status == "built"
    kinds = numbers_db.execute("SELECT table_type FROM information_schema.tables WHERE table_name = 'big'").fetchall()
    assert kinds == [("VIEW",)]


def test_builds_are_recorded_with_their_as_of(
    small_built: duckdb.DuckDBPyConnection, project: AnalyticsProject
) -> None:
    rows = small_built.execute("SELECT model, as_of, row_count FROM analytics._builds").fetchall()
    assert {r[0] for r in rows} == set(project.models)
    assert {r[1] for r in rows} == {AS_OF}
    assert dict((r[0], r[2]) for r in rows)["lesson_funnel"] == 3


def test_as_of_without_time_zone_is_refused(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject
) -> None:
    with pytest.raises(ValueError, match="time zone"):
        list(build_models(warehouse_conn, project, as_of=datetime(2026, 11, 22)))


def _leftovers(conn: duckdb.DuckDBPyConnection) -> list:
    return conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE starts_with(table_name, ?)", [BUILD_PREFIX]
    ).fetchall()


def test_models_built_ahead_come_in_build_order_like_build_models(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject
) -> None:
    seed_small_world(warehouse_conn)
    in_turn = [(r.model.name, r.status, r.rows) for r in build_models(warehouse_conn, project, as_of=AS_OF)]
    with models_built_ahead(warehouse_conn, project, as_of=AS_OF, full_refresh=True) as results:
        ahead = [(r.model.name, r.status, r.rows) for r in results]
    assert ahead == in_turn and len(ahead) == len(project.models)


def test_an_error_of_the_build_ahead_is_raised_to_the_caller(
    warehouse_conn: duckdb.DuckDBPyConnection, project: AnalyticsProject
) -> None:
    with (
        pytest.raises(ValueError, match="time zone"),
        models_built_ahead(warehouse_conn, project, as_of=datetime(2026, 11, 22)) as results,
    ):
        list(results)
    assert warehouse_conn.execute("SELECT 42").fetchone() == (42,)  # the thread is done with the connection


def test_leaving_the_build_ahead_early_stops_the_model_running(
    tmp_path: Path, numbers_db: duckdb.DuckDBPyConnection
) -> None:
    """A run stopped after the first model: the second, a statement of minutes, is interrupted, never swapped in,
    and the connection is free when the block ends."""
    root = tmp_path / "models"
    tiny_project(tmp_path)
    (root / "marts" / "slow.sql").write_text(
        "select count(*) as n from {{ ref('big') }}, range(100000) a, range(100000) b"
    )
    project = load_project(root)
    with models_built_ahead(numbers_db, project) as results:
        first = next(results)
    assert first.model.name == "big" and first.status == "built"
    built = {m for (m,) in numbers_db.execute("SELECT model FROM analytics._builds").fetchall()}
    assert built == {"big"}
    assert not _leftovers(numbers_db)
