"""The certificates asset: loads the webhook inbox into lms.certificate_events and lms.certificates.

One multi-asset (op `certificates`) materializes both tables because they change in one load (one DuckDB
transaction, through Warehouse.load() like every stream) together with the inbox position; their keys are
lms/<table> like every synced table, so the analytics models that read them hang below them in the graph.
The logic is in pipeline/webhooks/load.py, shared with `lessonsync sync`."""

# No `from __future__ import annotations`: Dagster reads the resource annotations at runtime.
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetSpec,
    MaterializeResult,
    multi_asset,
)

from pipeline.contract.tables import CERTIFICATE_EVENTS, CERTIFICATES, TableSpec
from pipeline.defs.certificates.resource import InboxResource
from pipeline.defs.common import Metadata, table_data_version, table_definition_metadata
from pipeline.defs.policy import POOL
from pipeline.defs.resources import WarehouseResource
from pipeline.webhooks import LoadStats, load_certificate_events, table_rows, table_versions

GROUP = "certificates"
EVENTS_KEY = AssetKey(["lms", CERTIFICATE_EVENTS.name])
CERTIFICATES_KEY = AssetKey(["lms", CERTIFICATES.name])


def _spec(key: AssetKey, table: TableSpec) -> AssetSpec:
    return AssetSpec(
        key=key,
        group_name=GROUP,
        kinds={"duckdb"},
        description=table.description,
        metadata=table_definition_metadata(table),
    )


@multi_asset(
    name="certificates", specs=[_spec(EVENTS_KEY, CERTIFICATE_EVENTS), _spec(CERTIFICATES_KEY, CERTIFICATES)], pool=POOL
)
def certificates(
    context: AssetExecutionContext, warehouse: WarehouseResource, inbox: InboxResource
) -> Iterator[MaterializeResult[Any]]:
    """Certificates earned and expired, as the platform's webhooks announced them (history and current state)."""
    wh = warehouse.warehouse()
    # One open of the file for the look-ups, the loads and the row counts (three opens, ~30-50 ms each, in a
    # run that loads nothing); between them only the inbox is read and the lake written, no fetch.
    with wh.one_connection():
        stats = load_certificate_events(wh, inbox.inbox(), run_id=context.run.run_id)
        row_counts = table_rows(wh)
        versions = table_versions(wh)
    context.log.info(_summary(stats))
    for line in quarantine_warnings(stats):
        context.log.warning(line)
    for key in (EVENTS_KEY, CERTIFICATES_KEY):
        yield MaterializeResult(
            asset_key=key,
            metadata={**_metadata(stats), "dagster/row_count": row_counts[key.path[-1]]},
            data_version=table_data_version(versions, key.path[-1]),  # the same while no event changes the table
        )


def _metadata(stats: LoadStats) -> Metadata:
    return {
        "events_loaded": stats.events_loaded,
        "completed": stats.completed,
        "expired": stats.expired,
        "duplicates_skipped": stats.duplicates_skipped,
        "certificates_changed": stats.certificates_changed,
        "hwm_before": stats.hwm_before,
        "hwm_after": stats.hwm_after,
        "inbox_id": stats.inbox_id or "(no inbox yet)",
        "transactions": stats.transactions,
        "quarantined": stats.quarantined,
        "quarantined_in_inbox": stats.quarantined_pending,
    }


MAX_WARNED = 10


def quarantine_warnings(stats: LoadStats) -> list[str]:
    """One warning per event this load set aside (the first MAX_WARNED), and one for those still waiting."""
    lines = [f"certificates: quarantined {letter.describe()}" for letter in stats.dead_letters[:MAX_WARNED]]
    if stats.quarantined > MAX_WARNED:
        lines.append(f"certificates: and {stats.quarantined - MAX_WARNED} more events quarantined")
    if stats.quarantined_pending:
        lines.append(
            f"certificates: {stats.quarantined_pending} inbox event(s) in quarantine, not loaded; "
            "`lessonsync inbox list` shows them, `lessonsync inbox replay SEQ` loads one once fixed, "
            "`lessonsync inbox discard SEQ` drops one"
        )
    return lines


def _summary(stats: LoadStats) -> str:
    if stats.inbox_id is None:
        return "no certificate inbox yet (the webhook receiver has not stored anything); nothing to load"
    return (
        f"inbox {stats.inbox_id}: sequence {stats.hwm_before} -> {stats.hwm_after}; loaded {stats.events_loaded} "
        f"events ({stats.completed} completed, {stats.expired} expired), skipped {stats.duplicates_skipped} "
        f"already loaded, {stats.certificates_changed} certificates changed"
    )
