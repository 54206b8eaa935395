"""The catalog read reuses definitions derived from the same CREATE text, and never a stale one: a no-change
load derives nothing anew, a new column / comment / registry row / rolled-back DDL is seen at once."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from warehouse_helpers import ALL_SPECS, ANSWERS, GROUPS, answer, load_once

from pipeline.warehouse import Warehouse
from pipeline.warehouse.duck import catalog
from pipeline.warehouse.duck.catalog import read_catalog, read_table_def


def test_a_repeated_load_derives_no_table_definition_anew(wh: Warehouse) -> None:
    wh.ensure_tables(ALL_SPECS)
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1")])])
    before = dict(catalog.READS)
    load_once(wh, "answers", [(ANSWERS, [answer("al1", "q1")])])  # same rows: nothing changes but load times
    wh.ensure_tables(ALL_SPECS)
    assert catalog.READS["full"] == before["full"]
    assert catalog.READS["reused"] > before["reused"]


def test_schema_changes_are_seen_at_once(wh: Warehouse) -> None:
    wh.ensure_tables([ANSWERS, GROUPS])
    with wh.connect() as conn:
        first = {t.name: t for t in read_catalog(conn)}
        assert read_catalog(conn) == tuple(first.values())  # reused, equal
        conn.execute("ALTER TABLE lms.groups ADD COLUMN extra_note VARCHAR")
        assert read_table_def(conn, "groups").columns[-1] == ("extra_note", "VARCHAR")
        conn.execute("COMMENT ON TABLE lms.groups IS 'renamed'")
        assert read_table_def(conn, "groups").comment == "renamed"
        conn.execute("UPDATE lms._tables SET parent = 'answers' WHERE table_name = 'groups'")
        assert read_table_def(conn, "groups").parent == "answers"
        conn.begin()
        conn.execute("ALTER TABLE lms.answers ADD COLUMN scratch INTEGER")
        assert read_table_def(conn, "answers").columns[-1] == ("scratch", "INTEGER")
        conn.rollback()
        assert read_table_def(conn, "answers") == first["answers"]
    evolved = dataclasses.replace(ANSWERS, schema=ANSWERS.schema.append(pa.field("feedback_title", pa.string())))
    wh.ensure_tables([evolved])
    with wh.connect(read_only=True) as conn:
        assert "feedback_title" in read_table_def(conn, "answers").column_names


def test_a_key_added_after_the_rows_is_seen(wh: Warehouse) -> None:
    with wh.connect() as conn:
        conn.execute("CREATE SCHEMA lms; CREATE TABLE lms.t (a INTEGER, b VARCHAR)")
        assert read_table_def(conn, "t").key == ()
        conn.execute("ALTER TABLE lms.t ADD PRIMARY KEY (a)")
        assert read_table_def(conn, "t").key == ("a",)


def test_reading_the_tables_one_by_one_derives_the_catalog_once(wh: Warehouse) -> None:
    wh.ensure_tables(ALL_SPECS)
    with wh.connect() as conn:
        conn.execute("COMMENT ON TABLE lms.groups IS 'a catalog this process has not derived yet'")
        before = dict(catalog.READS)
        for spec in ALL_SPECS:
            assert read_table_def(conn, spec.name).name == spec.name
        assert read_table_def(conn, "no_such_table") is None
        assert catalog.READS["full"] == before["full"] + 1


def test_a_block_that_changes_no_table_reads_the_catalog_once(wh: Warehouse) -> None:
    wh.ensure_tables(ALL_SPECS)
    with wh.connect() as conn:
        with catalog.catalog_unchanged(conn):
            before = dict(catalog.READS)
            assert [read_table_def(conn, spec.name).name for spec in ALL_SPECS] == [spec.name for spec in ALL_SPECS]
            assert read_catalog(conn) and before == catalog.READS  # no query of the catalog at all
        conn.execute("ALTER TABLE lms.groups ADD COLUMN after_the_block VARCHAR")
        assert read_table_def(conn, "groups").columns[-1] == ("after_the_block", "VARCHAR")  # read again after it
