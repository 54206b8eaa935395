"""Warehouses written before 2026-11-25 declared each data table's key as a PRIMARY KEY (an ART index) and
kept no key in lms._tables. The next commit rebuilds every such table without the index (same rows, same
storage order, key registered, comment kept, the old sliced first load's leftover shadow table dropped);
from then on it equals a warehouse that never had the index, and the key check finds a planted duplicate."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from warehouse_helpers import ALL_SPECS, ANSWERS, GROUPS, T0, answer, dump, load_once, make_warehouse

from pipeline.warehouse import Warehouse, duplicate_keys
from pipeline.warehouse.duck.arrow_types import q
from pipeline.warehouse.duck.catalog import read_catalog


def loads(wh: Warehouse, generation: int) -> None:
    minutes = 10 * generation
    load_once(
        wh,
        "answers",
        [
            (
                ANSWERS,
                [
                    answer(
                        f"a{i}",
                        "q1",
                        minutes=minutes,
                        valid=generation % 2 == 0,
                        tags=["t", str(generation)] if i % 2 else None,
                    )
                    for i in range(generation, 20 + generation)
                ],
            )
        ],
        cursor=T0 + timedelta(minutes=minutes),
    )
    load_once(
        wh,
        "groups",
        [(GROUPS, [{"id": f"g{i}"} for i in range(generation, 5 + generation)])],
        complete_snapshots={"groups"},
    )


def make_legacy(wh: Warehouse) -> None:
    """Turn `wh` into what the code before 2026-11-25 wrote: each registered table with PRIMARY KEY (key) and
    no NOT NULL of its own, the registry without its key column, and a crashed sliced first load's shadow."""
    with wh.connect() as conn:
        for table in read_catalog(conn):
            columns = ", ".join(f"{q(name)} {type_sql}" for name, type_sql in table.columns)
            key = f", PRIMARY KEY ({', '.join(q(k) for k in table.key)})" if table.key else ""  # append tables: none
            if table.name == "groups":  # old first loads added the key by ALTER TABLE, which a reopen lost
                key = ""
            conn.execute(f"CREATE TABLE lms._old ({columns}{key})")
            conn.execute(f"INSERT INTO lms._old SELECT * FROM lms.{table.name}")
            conn.execute(f"DROP TABLE lms.{table.name}")
            conn.execute(f"ALTER TABLE lms._old RENAME TO {table.name}")
            conn.execute(f"COMMENT ON TABLE lms.{table.name} IS '{table.comment}'")
        conn.execute("ALTER TABLE lms._tables DROP COLUMN key")
        conn.execute("CREATE TABLE lms._first_answers AS SELECT * FROM lms.answers LIMIT 0")
        # a table some other code created in lms with its own key (not registered here): left as it is
        conn.execute("CREATE TABLE lms.foreign_table (id VARCHAR PRIMARY KEY)")


def primary_keys(wh: Warehouse) -> list[tuple[str, list[str]]]:
    with wh.connect(read_only=True) as conn:
        return conn.execute(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
            "WHERE schema_name = 'lms' AND constraint_type = 'PRIMARY KEY' "
            "AND NOT starts_with(table_name, '_') ORDER BY 1"
        ).fetchall()


def comparable(wh: Warehouse) -> dict[str, list]:
    tables = dump(wh)
    tables["_load_runs"] = [r[:1] + r[2:] for r in tables["_load_runs"]]  # load ids carry a random token
    return tables


def test_a_warehouse_with_primary_keys_is_migrated_by_its_next_commit(tmp_path: Path) -> None:
    legacy, reference = make_warehouse(tmp_path / "legacy"), make_warehouse(tmp_path / "reference")
    for wh in (legacy, reference):
        wh.ensure_tables(ALL_SPECS)
        loads(wh, 1)
    make_legacy(legacy)
    assert ("answers", list(ANSWERS.key)) in primary_keys(legacy)
    before = dump(legacy, ("answers", "groups"))
    with legacy.connect(read_only=True) as conn:  # a reader of the old file still sees the keys (from the index)
        assert {t.name: t.key for t in read_catalog(conn)}["answers"] == ANSWERS.key

    load_once(legacy, "answers", [(ANSWERS, [answer("a1", "q1", minutes=10, valid=False)])])  # same row again
    # the tables this load wrote, and (in its transaction) all the other registered ones
    assert primary_keys(legacy) == [("foreign_table", ["id"])]
    assert dump(legacy, ("groups",)) == {"groups": before["groups"]}
    with legacy.connect(read_only=True) as conn:
        assert [r[:3] for r in dump(legacy, ("answers",))["answers"]] == [r[:3] for r in before["answers"]]
        assert conn.execute("SELECT key FROM lms._tables WHERE table_name = 'answers'").fetchone()[0] == list(
            ANSWERS.key
        )
        assert conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'answers'").fetchone()[0]
        assert not conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '\\_first\\_%' ESCAPE '\\'"
        ).fetchone()[0]
    load_once(reference, "answers", [(ANSWERS, [answer("a1", "q1", minutes=10, valid=False)])])

    for wh in (legacy, reference):
        loads(wh, 2)
    legacy_tables = comparable(legacy)
    assert legacy_tables.pop("foreign_table") == []
    assert legacy_tables == comparable(reference)
    with legacy.connect() as conn:
        conn.execute("INSERT INTO lms.answers SELECT * FROM lms.answers LIMIT 1")
        assert duplicate_keys(conn, "answers") == 1
