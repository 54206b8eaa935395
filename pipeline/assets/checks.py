"""Asset checks on the raw tables: full unique keys, links between tables, and tables that shrink
unexpectedly. One check step per table (its checks share one read-only connection), run after its asset.

They cost what the load cost, not what the table holds: unique and non-null keys are guaranteed by the
declared primary key (DuckDB enforces it on every write; a table without one is scanned), and after a
run that loaded the table the link checks look at the rows that load wrote (pipeline.warehouse.checks
explains why that finds every orphan a load can make). A run that did not load the table (the
`check_warehouse` job) checks every row."""

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetChecksDefinition,
    multi_asset_check,
)

from pipeline.assets.common import POOL, lms_key
from pipeline.resources import WarehouseResource
from pipeline.source import TABLES
from pipeline.source.catalog import ANSWER_KEY
from pipeline.warehouse import duplicate_keys, null_keys, orphans, row_count
from pipeline.warehouse.checks import enforced_by_primary_key, last_load_time

CHECKED_TABLES = tuple(name for name, spec in TABLES.items() if spec.kind != "append")
MAX_DELETED_FRACTION = float(os.environ.get("LESSONSYNC_MAX_DELETED_FRACTION", "0.2"))


@dataclass(frozen=True)
class Link:
    child: str
    parent: str
    on: dict[str, str]  # child column -> parent column

    @property
    def check_name(self) -> str:
        return f"links_to_{self.parent}"


LINKS = (
    Link("answers", "active_lessons", {"user_id": "user_id", "lesson_id": "lesson_id"}),
    Link("answer_results", "answers", {k: k for k in ANSWER_KEY}),
    Link("lesson_session_registrations", "lesson_sessions", {"session_id": "id"}),
    Link("group_members", "groups", {"group_id": "id"}),
    Link("group_members", "users", {"user_id": "id"}),
)


def table_checks(table: str) -> AssetChecksDefinition:
    key, links = lms_key(table), [link for link in LINKS if link.child == table]
    specs = [
        AssetCheckSpec("key_unique_not_null", asset=key, blocking=True,
                       description=f"Every row has a full, unique key {TABLES[table].key}."),
        *(AssetCheckSpec(link.check_name, asset=key,
                         description=f"Every live row has its lms.{link.parent} row.") for link in links),
        AssetCheckSpec("not_shrinking", asset=key,
                       description=f"The last load marked at most {MAX_DELETED_FRACTION:.0%} of the rows deleted "
                                   "(LESSONSYNC_MAX_DELETED_FRACTION)."),
    ]

    @multi_asset_check(name=f"check_{table}", specs=specs, pool=POOL, can_subset=True)
    def _checks(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> Iterator[AssetCheckResult]:
        selected = {spec_key.name for spec_key in context.selected_asset_check_keys}
        loaded_here = _materialized_in_this_run(context, key)
        with warehouse.warehouse().connect(read_only=True) as conn:
            if "key_unique_not_null" in selected:
                duplicates, nulls = duplicate_keys(conn, table), null_keys(conn, table)
                yield AssetCheckResult(check_name="key_unique_not_null", asset_key=key,
                                       passed=duplicates == 0 and nulls == 0,
                                       metadata={"duplicate_keys": duplicates, "null_keys": nulls,
                                                 "enforced_by_primary_key": enforced_by_primary_key(conn, table)})
            since = last_load_time(conn, table) if loaded_here and links else None
            for link in links:
                if link.check_name in selected:
                    count = orphans(conn, link.child, link.parent, link.on, touched_since=since)
                    scope = "rows loaded by this run" if since is not None else "every row"
                    yield AssetCheckResult(check_name=link.check_name, asset_key=key, passed=count == 0,
                                           metadata={"orphans": count, "checked": scope})
            if "not_shrinking" in selected:
                yield _shrink_result(conn, table)

    return _checks


def _materialized_in_this_run(context: AssetCheckExecutionContext, key) -> bool:
    event = context.instance.get_latest_materialization_event(key)
    return event is not None and event.run_id == context.run.run_id


def _shrink_result(conn: duckdb.DuckDBPyConnection, table: str) -> AssetCheckResult:
    live = row_count(conn, table)
    last = conn.execute(
        "SELECT json_extract(tables, ?) FROM lms._load_runs WHERE json_extract(tables, ?) IS NOT NULL "
        "ORDER BY load_seq DESC LIMIT 1", [f"$.{table}", f"$.{table}"]).fetchone()
    counts = json.loads(last[0]) if last and isinstance(last[0], str) else dict(last[0] if last else {})
    deleted, inserted = int(counts.get("deleted", 0)), int(counts.get("inserted", 0))
    before = live - inserted + deleted
    fraction = deleted / before if before else 0.0
    return AssetCheckResult(
        check_name="not_shrinking", asset_key=lms_key(table), passed=fraction <= MAX_DELETED_FRACTION,
        severity=AssetCheckSeverity.WARN,
        metadata={"live_rows": live, "live_rows_before_last_load": before, "deleted_by_last_load": deleted,
                  "deleted_fraction": round(fraction, 4)})


raw_table_checks = [table_checks(t) for t in CHECKED_TABLES]
