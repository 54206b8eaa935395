"""Adopting a warehouse from before certificates went through Warehouse.load(): one that has
lms.certificate_inbox_state (one high-water mark per inbox id) and certificate tables written outside the lake.

One load, once: the rows of lms.certificate_events and lms.certificates go to the lake as its parts, and its
commit drops the old state table and both tables, recreates them from their specs and inserts those rows,
storing the mark of the inbox loaded last as that inbox stream's position, all in one DuckDB transaction (the
manifest written inside it, as for every load). So nothing is reloaded from the inbox or lost, the lake from
then on holds every certificate row (`lessonsync rebuild` needs nothing else), and a crash at any point leaves
either the old layout or the new one: before the manifest the old tables are untouched; after it, the next
writer replays the manifest, which drops and recreates the same way. The rows' first/last_loaded_at become the
adoption's load time (the lake cannot carry the old ones, and a replay must give what the live commit gave)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from pipeline.warehouse import Warehouse
from pipeline.webhooks.stream import SPECS, inbox_stream

log = logging.getLogger(__name__)
LEGACY_STATE = "certificate_inbox_state"
_BATCH_ROWS = 65_536


def adopt_legacy_state(warehouse: Warehouse, run_id: str) -> bool:
    """Adopt an old-layout warehouse (see the module docstring); False when there is nothing to adopt."""
    marks = _legacy_marks(warehouse)
    if marks is None:
        return False
    with warehouse.load(_stream(marks), run_id=run_id, started_at=datetime.now(UTC)) as load:
        with warehouse.connect(read_only=True) as conn:  # closed before the commit opens the file to write
            for spec in SPECS:
                load.write(spec, spec.schema.empty_table())  # in the load even when empty: dropped, so recreated
                columns = ", ".join(f'"{name}"' for name in spec.schema.names)
                reader = conn.sql(f"SELECT {columns} FROM lms.{spec.name}").to_arrow_reader(_BATCH_ROWS)
                for batch in reader:
                    load.write(spec, pa.Table.from_batches([batch]).cast(spec.schema))
        position = marks[0][1] if marks else None
        result = load.commit(
            position=position,
            drop_before=(LEGACY_STATE, *(spec.name for spec in SPECS)),
            stats={"adopted": f"lms.{LEGACY_STATE}", "inbox_marks": {inbox_id: mark for inbox_id, mark, _ in marks}},
        )
    log.warning(
        "certificates: adopted lms.%s (inbox marks %s) and %s certificate rows into the lake (load %s)",
        LEGACY_STATE,
        {inbox_id: mark for inbox_id, mark, _ in marks},
        {name: stats.inserted for name, stats in result.tables.items()},
        result.load_id,
    )
    return True


def _legacy_marks(warehouse: Warehouse) -> list[tuple[str, int, datetime]] | None:
    """(inbox_id, high_water_mark, updated_at) of the old state table, latest first; None when it is absent."""
    if not warehouse.path.exists():
        return None
    with warehouse.connect(read_only=True) as conn:
        try:
            rows = conn.execute(
                f"SELECT inbox_id, high_water_mark, updated_at FROM lms.{LEGACY_STATE} "
                "ORDER BY updated_at DESC, inbox_id"
            ).fetchall()
        except duckdb.CatalogException:
            return None
    return [(str(inbox_id), int(mark), updated_at) for inbox_id, mark, updated_at in rows]


def _stream(marks: list[tuple[str, int, datetime]]) -> str:
    """The stream that inherits a mark: the inbox loaded last. An inbox loaded before it was replaced by a
    recreated one (its file is gone: nothing will read it again); its mark is kept in the load's stats."""
    return inbox_stream(marks[0][0]) if marks else "certificate_inbox_adoption"
