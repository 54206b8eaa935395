"""A platform that begins to send a field the spec does not have (`quizTimeSeconds` on active lessons, from the
simulator's first advance), over HTTP, through real Dagster runs into a real DuckDB: under `evolve` (the default) it
is a typed, described column of lms.active_lessons on the load that first sees it, equal to the platform field for
field (also when only some records carry it), named in the run's metadata, the asset's column schema and
`lessonsync status`, kept by a later run and by a rebuild from the lake; a value of another type is quarantined;
`freeze` fails the stream naming the field while the others commit; `discard_value` keeps it in `extra`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from stack_helpers import RAW, assert_warehouse_equals_platform

from pipeline.cli.status import collect
from pipeline.settings import Settings, load_settings
from pipeline.stack import Stack, environment, local_stack
from pipeline.verify import compare_warehouse
from pipeline.warehouse.duck.connection import ConnectionSettings
from pipeline.warehouse.upkeep.rebuild import rebuild_into

pytestmark = pytest.mark.slow
QUIZ = ("active_lessons", "quizTimeSeconds", "int")  # sent from the first advance on
KEY = ("_ownerId", "_userId", "_lessonId")


def settings_of(stack: Stack) -> Settings:
    with environment(stack.run_env()):
        return load_settings()


def sent(stack: Stack) -> dict[tuple[str, ...], object]:
    """The platform's quizTimeSeconds by active-lesson key, for the records that carry it."""
    return {
        tuple(r[k] for k in KEY): r["quizTimeSeconds"]
        for r in stack.sim.ground_truth("active_lessons")
        if "quizTimeSeconds" in r
    }


def load_seq(conn: duckdb.DuckDBPyConnection, run_id: str, stream: str) -> int | None:
    found = conn.execute(
        "SELECT load_seq FROM lms._load_runs WHERE run_id = ? AND stream = ?", [run_id, stream]
    ).fetchone()
    return None if found is None else found[0]


def schema_of(path: Path) -> dict[str, list[tuple[str, str, str | None]]]:
    """Every lms table's columns (name, type, comment of a discovered column) and lms._discovered_columns' rows."""
    with duckdb.connect(str(path), read_only=True) as conn:
        discovered = {
            (t, c) for t, c in conn.execute("SELECT table_name, column_name FROM lms._discovered_columns").fetchall()
        }
        found: dict[str, list[tuple[str, str, str | None]]] = {}
        for table, column, kind, comment in conn.execute(
            "SELECT table_name, column_name, data_type, comment FROM duckdb_columns() WHERE schema_name = 'lms' "
            "ORDER BY table_name, column_index"
        ).fetchall():
            found.setdefault(table, []).append((column, kind, comment if (table, column) in discovered else None))
        return found


def table_digests(path: Path) -> dict[str, tuple[int, int]]:
    with duckdb.connect(str(path), read_only=True) as conn:
        tables = [
            t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'lms'").fetchall()
        ]
        return {
            t: conn.execute(f'SELECT count(*), coalesce(sum(hash(x)::HUGEINT), 0) FROM lms."{t}" AS x').fetchone()
            for t in tables
        }


def test_a_new_field_becomes_a_typed_column_seen_everywhere_and_kept_by_later_runs_and_rebuild(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny", new_fields=[QUIZ]) as stack:
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)  # the platform starts sending quizTimeSeconds on the active lessons that change
        second = stack.sync(select=RAW)
        assert second.success, second.error
        assert_warehouse_equals_platform(stack)  # the new column too, field for field
        expected = sent(stack)
        assert expected
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            seq = load_seq(conn, second.run_id, "active_lessons")
            kind, comment = conn.execute(
                "SELECT data_type, comment FROM duckdb_columns() WHERE schema_name = 'lms' "
                "AND table_name = 'active_lessons' AND column_name = 'quiz_time_seconds'"
            ).fetchone()
            loaded = conn.execute(
                "SELECT owner_id, user_id, lesson_id, quiz_time_seconds, extra FROM lms.active_lessons "
                "WHERE quiz_time_seconds IS NOT NULL"
            ).fetchall()
            registered = conn.execute(
                "SELECT table_name, column_name, api_path, type, first_seen_load FROM lms._discovered_columns"
            ).fetchall()
        assert kind == "BIGINT"
        assert comment == f"field quizTimeSeconds the platform began sending; not in the spec; first seen in load {seq}"
        assert {(o, u, le): q for o, u, le, q, _ in loaded} == expected and all(e is None for *_, e in loaded)
        assert registered == [("active_lessons", "quiz_time_seconds", "quizTimeSeconds", "BIGINT", seq)]
        said = f"new column `active_lessons.quiz_time_seconds` BIGINT (field quizTimeSeconds), first seen in load {seq}"
        metadata = second.materializations["lms/active_lessons"]
        assert metadata["new_columns"] == [said]
        columns = {c.name: c for c in metadata["dagster/column_schema"].columns}
        assert columns["quiz_time_seconds"].type == "BIGINT" and columns["quiz_time_seconds"].description == comment
        assert "lms/active_lessons:contract_unchanged" in second.failed_checks  # warns: the contract moved
        status = collect(settings_of(stack))
        assert next(s for s in status.streams if s.name == "active_lessons").load.new_columns == [said]
        assert any(said in line for line in status.lines())

        # A later run (a new client, the schema read back from the warehouse): the column is the table's, more
        # values load into it, and a string where it holds integers quarantines that record, the field named.
        planted = stack.sim.plant_invalid("active_lessons", "quizTimeSeconds", "12", touch=True)
        stack.advance(hours=24)
        third = stack.sync(select=RAW)
        assert third.success, third.error
        metadata = third.materializations["lms/active_lessons"]
        assert metadata["quarantined"] == 1 and metadata["new_columns"] == []
        assert "quiz_time_seconds" in {c.name for c in metadata["dagster/column_schema"].columns}
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            field, message = conn.execute(
                "SELECT field, message FROM lms.quarantine WHERE stream = 'active_lessons'"
            ).fetchone()
            assert conn.execute("SELECT count(*) FROM lms._discovered_columns").fetchone()[0] == 1
            diffs = {d.table: d for d in compare_warehouse(conn, stack.sim) if not d.equal}
        assert field == "quizTimeSeconds" and "BIGINT" in message and "'12'" in message
        key = tuple(planted[k] for k in KEY)
        assert list(diffs) == ["active_lessons"], [d.summary() for d in diffs.values()]
        assert diffs["active_lessons"].mismatch_count >= 1
        assert all(str(key) in m for m in diffs["active_lessons"].mismatches)  # only the quarantined record
        assert len(sent(stack)) > len(expected)

        settings = settings_of(stack)
        rebuilt = tmp_path / "rebuilt.duckdb"
        rebuild_into(settings.lake_location, rebuilt, ConnectionSettings("1GB", None, 2, 0.0))
        assert schema_of(rebuilt) == schema_of(stack.warehouse_path)  # same columns, types, discovered comments
        assert table_digests(rebuilt) == table_digests(stack.warehouse_path)  # same rows, registry included


def test_a_field_sent_on_some_records_only_is_null_on_the_others(tmp_path: Path) -> None:
    """A full refresh in small pages: the older active lessons come first, without the field, so the load discovers
    the column midway; its earlier part keeps fewer columns, and the table is still exact."""
    with local_stack(tmp_path / "data", scale="tiny", page_size=50, new_fields=[(*QUIZ, 1, 0.5)]) as stack:
        assert stack.sync(select=RAW).success
        began = stack.sim.now()
        stack.advance(hours=24)
        refresh = stack.sync(select=RAW, full_refresh=True)
        assert refresh.success, refresh.error
        assert_warehouse_equals_platform(stack)
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            with_value, changed_without = conn.execute(
                "SELECT count(quiz_time_seconds), count(*) FILTER (WHERE quiz_time_seconds IS NULL AND last_date >= ?) "
                "FROM lms.active_lessons",
                [began],
            ).fetchone()
            seq = load_seq(conn, refresh.run_id, "active_lessons")
        assert with_value == len(sent(stack)) > 0 and changed_without > 0  # changed, but not in the share
        lake = settings_of(stack).lake_location
        (manifest,) = Path(lake, "_loads").glob(f"{seq:010d}-*.json")
        parts = next(t for t in json.loads(manifest.read_text())["tables"] if t["name"] == "active_lessons")["parts"]
        assert "quiz_time_seconds" not in parts[0]["columns"] and "columns" not in parts[-1]


def test_freeze_fails_the_stream_naming_the_field_while_the_others_commit(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny", new_fields=[QUIZ]) as stack:
        stack.env["LESSONSYNC_SCHEMA_CONTRACT_BY_STREAM"] = "active_lessons=freeze"
        assert stack.sync(select=RAW).success  # nothing new yet
        stack.advance(hours=24)
        frozen = stack.sync(select=RAW)
        assert not frozen.success
        assert "quizTimeSeconds" in (frozen.error or "") and "freeze" in (frozen.error or ""), frozen.error
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            committed = {
                s
                for (s,) in conn.execute(
                    "SELECT stream FROM lms._load_runs WHERE run_id = ?", [frozen.run_id]
                ).fetchall()
            }
            columns = [
                c
                for (c,) in conn.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = 'active_lessons'"
                ).fetchall()
            ]
        assert {"groups", "lessons", "lesson_sessions", "categories"} <= committed
        assert "active_lessons" not in committed and "answers" not in committed  # the answers follow their lessons
        assert "quiz_time_seconds" not in columns


def test_discard_value_keeps_the_field_in_extra(tmp_path: Path) -> None:
    with local_stack(tmp_path / "data", scale="tiny", new_fields=[QUIZ]) as stack:
        stack.env["LESSONSYNC_SCHEMA_CONTRACT"] = "discard_value"
        assert stack.sync(select=RAW).success
        stack.advance(hours=24)
        second = stack.sync(select=RAW)
        assert second.success, second.error
        assert_warehouse_equals_platform(stack)  # the field in `extra`, keyed by its API path
        metadata = second.materializations["lms/active_lessons"]
        assert metadata["new_field_paths"] == ["quizTimeSeconds"] and "new_columns" not in metadata
        with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
            kept = conn.execute(
                "SELECT count(*) FROM lms.active_lessons WHERE extra->>'quizTimeSeconds' IS NOT NULL"
            ).fetchone()[0]
            columns = [
                c
                for (c,) in conn.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = 'active_lessons'"
                ).fetchall()
            ]
            assert conn.execute("SELECT count(*) FROM lms._discovered_columns").fetchone()[0] == 0
        assert kept == len(sent(stack)) > 0 and "quiz_time_seconds" not in columns
