"""DDL from TableSpecs: types, keys (registered, NOT NULL, no index), load metadata columns, registry; schema
evolution."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from warehouse_helpers import ALL_SPECS, ANSWERS, GROUPS, TS, answer, load_once

from pipeline.contract.tables import TableSpec
from pipeline.warehouse import SchemaError, Warehouse, WarehouseMissingError, duplicate_keys


def columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'lms' "
        "AND table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()


def constraints(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, list[str]]]:
    return conn.execute(
        "SELECT constraint_type, constraint_column_names FROM duckdb_constraints() "
        "WHERE schema_name = 'lms' AND table_name = ? ORDER BY constraint_index",
        [table],
    ).fetchall()


def test_tables_get_types_keys_and_load_metadata(wh: Warehouse) -> None:
    wh.ensure_tables(ALL_SPECS)
    with wh.connect(read_only=True) as conn:
        assert columns(conn, "answers") == [
            ("active_lesson_id", "VARCHAR"),
            ("question_id", "VARCHAR"),
            ("attempt_index", "DOUBLE"),
            ("user_id", "VARCHAR"),
            ("lesson_id", "VARCHAR"),
            ("is_valid", "BOOLEAN"),
            ("tags", "VARCHAR[]"),
            ("validation", "JSON"),
            ("last_date", "TIMESTAMP WITH TIME ZONE"),
            ("first_loaded_at", "TIMESTAMP WITH TIME ZONE"),
            ("last_loaded_at", "TIMESTAMP WITH TIME ZONE"),
        ]
        # the key is registered and its columns are NOT NULL; no PRIMARY KEY (no ART index to pin in memory)
        assert conn.execute("SELECT key FROM lms._tables WHERE table_name = 'answers'").fetchone()[0] == [
            "active_lesson_id",
            "question_id",
            "attempt_index",
        ]
        assert constraints(conn, "answers") == [
            ("NOT NULL", ["active_lesson_id"]),
            ("NOT NULL", ["question_id"]),
            ("NOT NULL", ["attempt_index"]),
        ]
        # snapshot and child tables keep vanished rows with a deleted_at timestamp
        assert columns(conn, "groups")[-1] == ("deleted_at", "TIMESTAMP WITH TIME ZONE")
        assert columns(conn, "answer_results")[-1] == ("deleted_at", "TIMESTAMP WITH TIME ZONE")
        assert constraints(conn, "quarantine") == []
        assert [c for c, _ in columns(conn, "quarantine")] == [
            "seen_at",
            "stream",
            "raw",
            "first_loaded_at",
            "last_loaded_at",
        ]
        comment = conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'answers'").fetchone()[0]
        assert comment == "One answer to one question."
        registry = conn.execute("SELECT * FROM lms._tables ORDER BY 1").fetchall()
    assert ("lesson_session_registrations", "snapshot", None, "lesson_sessions", ["session_id", "user_id"]) in registry
    assert (
        "answers",
        "incremental",
        "last_date",
        None,
        ["active_lesson_id", "question_id", "attempt_index"],
    ) in registry


def test_ensure_tables_is_idempotent_and_structs_map(wh: Warehouse) -> None:
    nested = TableSpec(
        "nested",
        pa.schema(
            [
                pa.field("id", pa.string()),
                pa.field("quota", pa.struct([("type", pa.string()), ("left", pa.float64())])),
                pa.field("codes", pa.list_(pa.struct([("type", pa.string()), ("value", pa.string())]))),
                pa.field("day", pa.date32()),
                pa.field("n", pa.int32()),
            ]
        ),
        ("id",),
        "snapshot",
    )
    wh.ensure_tables([nested])
    wh.ensure_tables([nested])
    with wh.connect(read_only=True) as conn:
        assert columns(conn, "nested")[1:5] == [
            ("quota", 'STRUCT("type" VARCHAR, "left" DOUBLE)'),
            ("codes", 'STRUCT("type" VARCHAR, "value" VARCHAR)[]'),
            ("day", "DATE"),
            ("n", "INTEGER"),
        ]


def test_key_columns_are_not_null_and_a_duplicate_written_around_the_load_is_found(wh: Warehouse) -> None:
    wh.ensure_tables([GROUPS])
    with wh.connect() as conn:
        with pytest.raises(duckdb.ConstraintException, match="NOT NULL"):
            conn.execute("INSERT INTO lms.groups (id, title) VALUES (NULL, 'a')")
        conn.execute("INSERT INTO lms.groups (id, title) VALUES ('g', 'a')")
        assert duplicate_keys(conn, "groups") == 0
        conn.execute("INSERT INTO lms.groups (id, title) VALUES ('g', 'b')")  # no index refuses it: the check finds it
        assert duplicate_keys(conn, "groups") == 1


def test_new_column_is_added_and_old_rows_kept(wh: Warehouse) -> None:
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1")])])
    evolved = dataclasses.replace(ANSWERS, schema=ANSWERS.schema.append(pa.field("feedback_title", pa.string())))
    wh.ensure_tables([evolved])
    with wh.connect(read_only=True) as conn:
        assert columns(conn, "answers")[-1] == ("feedback_title", "VARCHAR")
        assert conn.execute("SELECT question_id, feedback_title FROM lms.answers").fetchall() == [("q1", None)]
    # a load with the evolved spec fills the column; a later load with the old spec leaves it alone
    load_once(wh, "answers", [(evolved, [{**answer("al1", "q1", minutes=1), "feedback_title": "well done"}])])
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1", minutes=2, valid=False)])])
    with wh.connect(read_only=True) as conn:
        assert conn.execute("SELECT is_valid, feedback_title FROM lms.answers").fetchall() == [(False, "well done")]


def test_type_change_and_key_change_are_refused(wh: Warehouse) -> None:
    wh.ensure_tables([GROUPS])
    retyped = dataclasses.replace(GROUPS, schema=GROUPS.schema.set(2, pa.field("disabled", pa.string())))
    with pytest.raises(SchemaError, match=r"column 'disabled' is BOOLEAN in the warehouse but VARCHAR"):
        wh.ensure_tables([retyped])
    rekeyed = dataclasses.replace(GROUPS, key=("id", "title"))
    with pytest.raises(SchemaError, match=r"has key \['id'\] but the spec says \['id', 'title'\]"):
        wh.ensure_tables([rekeyed])


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (pa.field("at", pa.timestamp("ns", tz="UTC")), "TIMESTAMPTZ keeps microseconds"),
        (pa.field("deleted_at", TS), "clashes with a warehouse column"),
        (pa.field("Bad Name", pa.string()), "is not a valid name"),
        (pa.field("blob", pa.string(), metadata={b"json": b"1"}).with_type(pa.int64()), "marked JSON"),
        (pa.field("m", pa.map_(pa.string(), pa.string())), "does not map"),
    ],
)
def test_bad_specs_are_refused_with_the_column_named(wh: Warehouse, field: pa.Field, message: str) -> None:
    spec = TableSpec("odd", pa.schema([pa.field("id", pa.string()), field]), ("id",), "snapshot")
    with pytest.raises(SchemaError, match=message):
        wh.ensure_tables([spec])
    assert not wh.path.exists()  # checked before the warehouse is even opened


def test_constructing_a_warehouse_touches_nothing(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path / "w" / "warehouse.duckdb", tmp_path / "w" / "lake")
    assert wh.cursor("answers") is None
    with pytest.raises(WarehouseMissingError, match="does not exist yet: run a sync"), wh.connect(read_only=True):
        pass
    assert not (tmp_path / "w").exists()
    assert "secret" not in repr(wh) and repr(wh).startswith("Warehouse(path=")
