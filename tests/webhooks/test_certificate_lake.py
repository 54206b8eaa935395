"""Certificates in the lake like every stream: `lessonsync rebuild` reproduces them from the lake alone, and a
warehouse written by the old loader (its own DDL and lms.certificate_inbox_state) is adopted once, keeping
its position and rows, also when the adoption's commit is cut short after its manifest."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from webhook_helpers import FUTURE, PAST, certificate

from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES, QUARANTINE, TableSpec
from pipeline.warehouse import Warehouse, hooks
from pipeline.warehouse.duck.arrow_types import field_type
from pipeline.warehouse.upkeep.rebuild import rebuild_into
from pipeline.warehouse.upkeep.status import stream_statuses
from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.load import load_certificate_events
from pipeline.webhooks.stream import high_water_mark, inbox_stream
from pipeline.webhooks.transform import current_state_rows, events_to_arrow

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
EVENTS = 40
ADOPTED = 25  # events the old loader had loaded
OLD_INBOX = "0123456789abcdef0123456789abcdef"  # an inbox replaced before the last one (its file is gone)
DATA_COLUMNS = "* EXCLUDE (first_loaded_at, last_loaded_at)"


def fill(inbox: Inbox, first: int, last: int) -> None:
    """Events first..last-1: 12 certificates completing, expiring, a late older completion, some renewals."""
    inbox.append(
        [
            to_delivery(
                orjson.dumps(
                    certificate(
                        f"c{n % 12}", PAST if n % 3 == 0 else FUTURE, f"2026-11-{(n * 7) % 27 + 1:02d}T00:00:00Z", __v=n
                    )
                ),
                T0 + timedelta(seconds=n),
                "lake-test",
            )
            for n in range(first, last)
        ]
    )


def make(path: Path) -> Warehouse:
    return Warehouse(path / "warehouse.duckdb", path / "lake")


def dump(wh: Warehouse, columns: str = "*") -> dict[str, list[tuple[Any, ...]]]:
    """Every lms table; `columns` for the data tables (those with load times), all columns of the others."""
    with wh.connect(read_only=True) as conn:
        names = conn.execute(
            "SELECT table_name, list_contains(list(column_name), 'first_loaded_at') FROM "
            "duckdb_columns() WHERE schema_name = 'lms' GROUP BY 1 ORDER BY 1"
        ).fetchall()
        return {
            name: conn.execute(f"SELECT {columns if loaded else '*'} FROM lms.{name} ORDER BY ALL").fetchall()
            for name, loaded in names
        }


def test_rebuild_of_certificates_from_the_lake_equals_the_warehouse(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    wh = make(tmp_path / "data")
    fill(inbox, 0, 20)
    load_certificate_events(wh, inbox, chunk_events=7)
    fill(inbox, 20, EVENTS)
    load_certificate_events(wh, inbox)
    recreated = Inbox(tmp_path / "recreated.sqlite3")  # a new inbox redelivering some old events, and new ones
    fill(recreated, 30, EVENTS + 5)
    load_certificate_events(wh, recreated)

    rebuilt = make(tmp_path / "rebuilt")
    report = rebuild_into(wh.lake, rebuilt.path, wh.connection_settings)
    assert report.loads == 5 and report.rows == {"certificate_events": EVENTS + 5, "certificates": 12}
    original = dump(wh)
    assert dump(rebuilt) == original  # every column: load times, positions, _load_runs and _tables included
    positions = sorted(
        [(inbox_stream(inbox.inbox_id() or ""), EVENTS), (inbox_stream(recreated.inbox_id() or ""), EVENTS + 5 - 30)]
    )
    assert [row[:1] + row[-1:] for row in original["_sync_state"]] == positions
    assert [(s.stream, s.position) for s in stream_statuses(wh.lake_dir)] == positions  # `lessonsync status`


def legacy_warehouse(data: Path, inbox: Inbox) -> Warehouse:
    """A warehouse as the old loader left it: its tables (own DDL, NOT NULLs, no registry rows) holding the
    first ADOPTED events, lms.certificate_inbox_state with the mark of this inbox and of an older one, and a
    stream load in the lake whose manifest lists those tables in its catalog."""
    seed = make(data.parent / "seed")
    limited = Inbox(data.parent / "seed-inbox.sqlite3")
    limited.append([to_delivery(e.payload, e.received_at, e.source) for e in inbox.read_events(up_to_sequence=ADOPTED)])
    load_certificate_events(seed, limited)
    wh = make(data)
    with wh.connect() as conn:
        conn.execute("CREATE SCHEMA lms")
        conn.execute(f"ATTACH '{seed.path}' AS seed (READ_ONLY)")
        for spec in (CERTIFICATE_EVENTS, CERTIFICATES):
            conn.execute(_legacy_ddl(spec))
            # the seed inbox has another id: the events keep the id of the inbox they came from
            replace = " REPLACE (? AS inbox_id)" if spec is CERTIFICATE_EVENTS else ""
            conn.execute(
                f"INSERT INTO lms.{spec.name} SELECT *{replace} FROM seed.lms.{spec.name}",
                [inbox.inbox_id()] if replace else [],
            )
        conn.execute("DETACH seed")
        conn.execute(
            "CREATE TABLE lms.certificate_inbox_state (inbox_id VARCHAR PRIMARY KEY, "
            "high_water_mark BIGINT NOT NULL, updated_at TIMESTAMPTZ NOT NULL)"
        )
        conn.execute(
            "INSERT INTO lms.certificate_inbox_state VALUES (?, ?, ?), (?, ?, ?)",
            [inbox.inbox_id(), ADOPTED, T0 + timedelta(days=1), OLD_INBOX, 7, T0],
        )
    with wh.load("quarantine", run_id="old-sync", started_at=T0) as load:
        load.write(
            QUARANTINE,
            pa.Table.from_pylist(
                [
                    {
                        "seen_at": T0,
                        "stream": "answers",
                        "endpoint": "/v1/x",
                        "params": "{}",
                        "page": 1,
                        "record_index": 0,
                        "field": "f",
                        "message": "m",
                        "raw": "[1]",
                    }
                ],
                schema=QUARANTINE.schema,
            ),
        )
        load.commit()
    return wh


def _legacy_ddl(spec: TableSpec) -> str:
    """The old loader's CREATE TABLE (pipeline/webhooks/sql.py before issue 17)."""
    columns = [f"{f.name} {field_type(f, spec.name)}{'' if f.nullable else ' NOT NULL'}" for f in spec.schema]
    columns += [
        "first_loaded_at TIMESTAMPTZ NOT NULL",
        "last_loaded_at TIMESTAMPTZ NOT NULL",
        f"PRIMARY KEY ({', '.join(spec.key)})",
    ]
    return f"CREATE TABLE lms.{spec.name} ({', '.join(columns)})"


@pytest.mark.parametrize("cut_short", [False, True], ids=["adopted", "adoption rolled forward"])
def test_a_warehouse_of_the_old_loader_keeps_its_position_and_rows(tmp_path: Path, cut_short: bool) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    fill(inbox, 0, EVENTS)
    wh = legacy_warehouse(tmp_path / "data", inbox)
    legacy = ("certificate_events", "certificates", "certificate_inbox_state")
    legacy_rows = {table: rows for table, rows in dump(wh, DATA_COLUMNS).items() if table in legacy}
    assert len(legacy_rows["certificate_events"]) == ADOPTED

    if cut_short:  # the adoption's manifest is written, then its DuckDB commit never happens

        def fail_after_manifest(point: str) -> None:
            if point == "manifest_written":
                raise KeyboardInterrupt("killed after the manifest")

        hooks.on_point(fail_after_manifest)
        try:
            with pytest.raises(KeyboardInterrupt):
                load_certificate_events(wh, inbox)
        finally:
            hooks.on_point(None)
        with_manifest = {t: rows for t, rows in dump(wh, DATA_COLUMNS).items() if t in legacy}
        assert with_manifest == legacy_rows  # DuckDB rolled back: the old layout, whole
        manifests = [json.loads(m.read_text()) for m in sorted((wh.lake_dir / "_loads").glob("*.json"))]
        assert [m["drop_before"] for m in manifests if "drop_before" in m] == [
            ["certificate_inbox_state", "certificate_events", "certificates"]
        ]  # the commit point was passed

    stats = load_certificate_events(wh, inbox)
    # nothing reloaded: the load starts at the old mark
    assert (stats.hwm_before, stats.events_loaded, stats.hwm_after) == (ADOPTED, EVENTS - ADOPTED, EVENTS)
    assert high_water_mark(wh, inbox.inbox_id() or "") == EVENTS
    after = dump(wh, DATA_COLUMNS)
    assert "certificate_inbox_state" not in after
    reference = make(tmp_path / "reference")
    load_certificate_events(reference, inbox)
    expected = dump(reference, DATA_COLUMNS)
    for table in ("certificate_events", "certificates"):
        assert after[table] == expected[table], table  # nothing lost, nothing doubled
    with wh.connect(read_only=True) as conn:
        [(stream, position, stats_json)] = conn.execute(
            "SELECT r.stream, s.position, r.stats FROM lms._load_runs AS r JOIN lms._sync_state AS s USING (stream) "
            "WHERE r.stats->>'adopted' IS NOT NULL"
        ).fetchall()
    assert (stream, position) == (inbox_stream(inbox.inbox_id() or ""), EVENTS)
    assert json.loads(stats_json)["inbox_marks"] == {inbox.inbox_id(): ADOPTED, OLD_INBOX: 7}

    rebuilt = make(tmp_path / "rebuilt")  # the lake now holds the adopted rows too
    rebuild_into(wh.lake, rebuilt.path, wh.connection_settings)
    assert dump(rebuilt) == dump(wh)


def test_rows_carry_exactly_the_declared_schemas() -> None:
    events = events_to_arrow([], "ab12")
    assert events.schema == CERTIFICATE_EVENTS.schema and current_state_rows(events).schema == CERTIFICATES.schema
