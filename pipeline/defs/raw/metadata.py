"""What the UI shows of a committed stream: one table's materialization metadata, and the facts of the load its
contract check reads."""

from __future__ import annotations

from dagster import MetadataValue

from pipeline.contract.evolution import evolved_spec
from pipeline.contract.tables import TABLES
from pipeline.defs.common import Metadata, raw_column_schema
from pipeline.raw.commit import StreamLoad
from pipeline.source import paths_of
from pipeline.warehouse import TableLoadStats


def table_metadata(done: StreamLoad, table: str) -> Metadata:
    """Materialization metadata of one table of a stream load."""
    stats, result, window = done.stats, done.result, done.window
    counts = result.tables.get(table, TableLoadStats())  # a table with no rows in this load is untouched
    rows_fetched = stats.rows.get(table, 0)
    new_fields = paths_of(table, stats.new_fields)  # the platform's additions our models do not declare
    metadata: Metadata = {
        "window": window.describe(),
        "rows_fetched": rows_fetched,
        "rows_per_second": round(rows_fetched / done.seconds, 1) if done.seconds > 0 else None,
        "requests": stats.requests,
        "retries": stats.retries,
        "pages": stats.pages,
        "pages_from_cache": stats.pages_from_cache,  # snapshots: served as before, not decoded (page_cache.py)
        "quarantined": stats.quarantined,
        "new_fields": len(new_fields),
        "new_field_paths": MetadataValue.json(new_fields),
        "sweep_passes": stats.passes,
        "complete": stats.complete,
        "cursor_before": MetadataValue.text(str(result.cursor_before)),
        "cursor_after": MetadataValue.text(str(result.cursor_after)),
        "duration_s": round(done.seconds, 3),
        "commit_s": round(done.commit_seconds, 3),
    }
    metadata.update({f"rows_{name}": value for name, value in counts.as_dict().items()})
    # the whole snapshot was the same as that load's (pipeline/warehouse/merge/repeats.py)
    if result.repeat_of is not None:
        metadata["unchanged_since_load"] = result.repeat_of
    if table in done.row_counts:
        metadata["dagster/row_count"] = done.row_counts[table]
    if table in done.rows_while_fetching:
        metadata["rows_inserted_while_fetching"] = done.rows_while_fetching[table]
    if table == done.stream:  # the stream's own table carries what the stream adds (the answers: their plan)
        metadata.update(done.extra)
    discovered = [c for c in done.discovered if c.table == table]
    if discovered:  # columns the platform's new fields became: the table's schema is no longer its declaration's
        metadata["new_columns"] = MetadataValue.json([c.summary() for c in discovered if c in done.new_columns])
        metadata["dagster/column_schema"] = raw_column_schema(evolved_spec(TABLES[table], discovered))
    return metadata


def contract_facts(done: StreamLoad, table: str) -> dict[str, object]:
    """What the contract check of `table` reads of this load: new fields met (kept in `extra`, or become columns),
    records quarantined."""
    new_fields = paths_of(table, done.stats.new_fields)
    return {
        "new_fields": len(new_fields),
        "new_field_paths": new_fields,
        "new_columns": [c.summary() for c in done.new_columns if c.table == table],
        "quarantined": done.stats.quarantined,
    }
