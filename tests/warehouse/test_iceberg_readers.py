"""The Iceberg mirror as its readers find it (docs/lake-tables.md): a table's history starts with its rows (created
with them in one commit; registered without a snapshot while the warehouse table is empty), polars reads it without
a warning, and DuckDB reads it offline the way the doc says."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import polars as pl
from iceberg_helpers import assert_mirror_equals, open_catalog
from warehouse_helpers import ANSWERS, GROUPS, answer
from warehouse_helpers import load_once as load_only

from pipeline.warehouse import Warehouse

DOC = Path(__file__).resolve().parents[2] / "docs" / "lake-tables.md"


def load_once(wh: Warehouse, stream: str, tables: list, **commit: object) -> None:
    """One load, then a mirror run (what the mirror step does after a run's commits)."""
    load_only(wh, stream, tables, **commit)
    assert wh.table_mirror is not None
    with wh.connect() as conn:
        failed = [stats.error for stats in wh.table_mirror.sync_behind(conn) if stats.error]
    assert not failed, failed


def groups(*ids: str) -> list:
    return [(GROUPS, [{"id": gid, "title": "G", "disabled": False} for gid in ids])]


def answers(n: int) -> list:
    return [(ANSWERS, [answer("al1", f"q{i}", user=f"u{i % 3}", valid=i % 2 == 0) for i in range(n)])]


def test_a_table_s_first_snapshot_holds_its_rows_even_when_it_was_mirrored_empty(mirrored: Warehouse, where) -> None:
    load_once(mirrored, "groups", groups("g1", "g2"))
    catalog = open_catalog(where)
    created = catalog.load_table(("lms", "groups"))
    assert [s.summary.get("total-records") for s in created.snapshots()] == ["2"]
    assert created.metadata.metadata_log == [], "the table was created, then written: two commits"

    empty = catalog.load_table(("lms", "answers"))  # mirrored while the warehouse table is empty
    assert empty.snapshots() == [], "an empty snapshot was written"
    assert empty.scan().to_arrow().num_rows == 0
    assert pl.scan_iceberg(empty).collect().height == 0

    load_once(mirrored, "answers", answers(5))
    history = catalog.load_table(("lms", "answers")).snapshots()
    assert [s.summary.get("total-records") for s in history] == ["5"]
    assert_mirror_equals(mirrored.path, where)


def test_polars_reads_a_mirrored_table_without_a_warning(mirrored: Warehouse, where) -> None:
    load_once(mirrored, "groups", groups("g1", "g2", "g3"))
    table = open_catalog(where).load_table(("lms", "groups"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = pl.scan_iceberg(table).filter(pl.col("id") != "g2").collect()
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert sorted(frame["id"]) == ["g1", "g3"]


def documented_duckdb_snippet() -> str:
    """The Python block of docs/lake-tables.md that reads a table with DuckDB."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    readers = [block for block in blocks if "import duckdb" in block]
    assert len(readers) == 1, "docs/lake-tables.md shows no (or more than one) way to read a table with DuckDB"
    return readers[0]


def test_duckdb_reads_a_mirrored_table_offline_as_documented(mirrored: Warehouse, where) -> None:
    """The documented commands need nothing DuckDB downloads: the connection loads only extensions built into the
    duckdb package, so they run offline."""
    load_once(mirrored, "answers", answers(7))
    namespace: dict[str, Any] = {"catalog": open_catalog(where)}
    exec(documented_duckdb_snippet(), namespace)  # the doc's own code, against a real mirrored table
    assert namespace["per_user"] == [("u0", 3, 2), ("u1", 2, 1), ("u2", 2, 1)]
    loaded = namespace["con"].execute(
        "SELECT extension_name FROM duckdb_extensions() WHERE loaded AND install_mode <> 'STATICALLY_LINKED'"
    )
    assert loaded.fetchall() == []
