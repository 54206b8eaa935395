"""Asset checks on the raw tables: full unique keys, links between tables, and tables that shrink
unexpectedly. The raw sync runs its tables' checks right after each stream commits, in its own step
(pipeline/defs/raw/assets.py); the certificates' checks run in a step of their own after that asset.

They cost what the load cost, not what the table holds: after a run that loaded the table the key and link
checks look at the rows that run's loads wrote (pipeline.warehouse.merge.checks explains why that finds every
duplicate key and every orphan a load can make). A run that did not load the table (the `check_warehouse`
job) checks every row. Each stream declares the links of its tables (`Link`, pipeline/contract/declarations.py)."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

import duckdb
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterEventType,
    multi_asset_check,
)

from pipeline.contract.streams import Link
from pipeline.contract.tables import TABLES
from pipeline.defs.common import Metadata, lms_key
from pipeline.defs.policy import POOL
from pipeline.defs.resources import WarehouseResource
from pipeline.settings import OrchestrationSettings
from pipeline.warehouse import (
    catalog_unchanged,
    duplicate_keys,
    last_load_counts,
    null_keys,
    orphans,
    row_count,
    tables_changed_by_run,
)

CHECKED_TABLES = tuple(name for name, spec in TABLES.items() if spec.kind != "append")
CONTRACT_CHECK = "contract_unchanged"
# The blocking check: its failure keeps what reads the table from running. It is evaluated whenever its table is
# loaded, changed or not: a blocking check without a result leaves its downstream ungated, with a warning.
BLOCKING_CHECK = "key_unique_not_null"


@dataclass(frozen=True)
class CheckRules:
    links: tuple[Link, ...]
    max_deleted_fraction: float  # not_shrinking fails above it (Settings.max_deleted_fraction)

    def links_of(self, table: str) -> list[Link]:
        return [link for link in self.links if link.child == table]


def table_check_specs(table: str, rules: CheckRules) -> list[AssetCheckSpec]:
    key, links = lms_key(table), rules.links_of(table)
    return [
        AssetCheckSpec(
            BLOCKING_CHECK,
            asset=key,
            blocking=True,
            description=f"Every row has a full, unique key {TABLES[table].key}.",
        ),
        *(
            AssetCheckSpec(link.check_name, asset=key, description=f"Every live row has its lms.{link.parent} row.")
            for link in links
        ),
        AssetCheckSpec(
            "not_shrinking",
            asset=key,
            description=f"The last load marked at most {rules.max_deleted_fraction:.0%} of the rows deleted "
            "(LESSONSYNC_MAX_DELETED_FRACTION).",
        ),
        AssetCheckSpec(
            CONTRACT_CHECK,
            asset=key,
            description="This run's load saw no field the models do not declare (kept in extra or become a "
            "column) and quarantined no record (warns: the platform's contract moved).",
        ),
    ]


# The raw tables' checks are check specs of the raw sync's multi-asset (pipeline/defs/raw/assets.py), run right
# after each stream commits; the certificates' run in a step of their own, after the certificates asset.
WEBHOOK_TABLES = ("certificates",)


def raw_check_results(
    conn: duckdb.DuckDBPyConnection,
    tables: Iterable[str],
    selected: dict[str, set[str]],
    rules: CheckRules,
    run_id: str,
    loaded: dict[str, dict[str, object]],
) -> Iterator[AssetCheckResult]:
    """The selected checks (`selected`: table -> check names) of `tables`, in their order (parents before their
    children). `loaded`: the tables this run materialized, with what their contract check reads (new_fields,
    new_field_paths, quarantined); their key and link checks look only at the rows this run loaded.

    A table this run loaded without changing a row of it (rows only seen again are no change), whose link parents it
    did not change either, and whose load met nothing new in the contract is not checked again: each check would find
    what its last evaluation found (no new key, no new or orphaned link, the same deletions, no new field). Its
    blocking key check passes on that ground, without a query; the others yield no result, so Dagster records them
    skipped and their last evaluation stands, as for a model whose inputs did not change."""
    tables = [t for t in tables if t in selected]
    last_loads = last_load_counts(conn, [t for t in tables if "not_shrinking" in selected[t]])
    changed = tables_changed_by_run(conn, run_id) if loaded else set()
    for table in tables:
        facts = loaded.get(table)
        inputs = {table, *(link.parent for link in rules.links_of(table))}
        if facts is not None and not inputs & changed and not _contract_news(facts):
            if BLOCKING_CHECK in selected[table]:
                yield AssetCheckResult(
                    check_name=BLOCKING_CHECK,
                    asset_key=lms_key(table),
                    passed=True,
                    metadata={"checked": "no row changed by this run"},
                )
            continue
        yield from _table_results(
            conn, table, selected[table], rules, run_id if facts is not None else None, last_loads.get(table, {})
        )
        if CONTRACT_CHECK in selected[table]:
            yield _contract_result(table, facts)


def skipped_tables(
    selected: dict[str, set[str]], tables: Iterable[str], results: Iterable[AssetCheckResult]
) -> list[str]:
    """Of `tables`, those with a selected check that has no result among `results` (raw_check_results skipped it)."""
    evaluated: dict[str, set[str]] = {}
    for result in results:
        if result.asset_key is not None and result.check_name is not None:
            evaluated.setdefault(result.asset_key.path[-1], set()).add(result.check_name)
    return [t for t in tables if t in selected and selected[t] - evaluated.get(t, set())]


def selected_checks(check_keys: Iterable[AssetCheckKey]) -> dict[str, set[str]]:
    """Table -> the names of its selected checks."""
    selected: dict[str, set[str]] = {}
    for check_key in check_keys:
        selected.setdefault(check_key.asset_key.path[-1], set()).add(check_key.name)
    return selected


def webhook_checks_step(tables: tuple[str, ...], rules: CheckRules) -> AssetChecksDefinition:
    @multi_asset_check(
        name="check_certificates",
        specs=[spec for t in tables for spec in table_check_specs(t, rules)],
        pool=POOL,
        can_subset=True,
        description=f"Key, link and shrink checks of {', '.join(f'lms.{t}' for t in tables)}, after the asset.",
    )
    def _checks(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> Iterator[AssetCheckResult]:
        selected = selected_checks(context.selected_asset_check_keys)
        loaded = _materialized_in_this_run(context, [lms_key(t) for t in selected])
        with warehouse.reading() as conn, catalog_unchanged(conn):
            yield from raw_check_results(
                conn, tables, selected, rules, context.run.run_id, {k.path[-1]: v for k, v in loaded.items()}
            )

    return _checks


def _table_results(
    conn: duckdb.DuckDBPyConnection,
    table: str,
    selected: set[str],
    rules: CheckRules,
    loaded_by: str | None,
    last_load: dict[str, int],
) -> Iterator[AssetCheckResult]:
    """`loaded_by`: the run id when this run materialized the table (link checks then look only at the rows
    its loads wrote: none at all when they wrote no row of the table), else None (every row). `last_load`:
    the counts of the newest load that wrote the table (last_load_counts)."""
    key, links = lms_key(table), rules.links_of(table)
    since = _first_load_time(conn, table, loaded_by) if loaded_by is not None else None
    if BLOCKING_CHECK in selected:
        if loaded_by is not None and since is None:  # materialized, but its loads wrote no row of it
            duplicates, scope = 0, "no rows loaded by this run"
        else:
            duplicates = duplicate_keys(conn, table, touched_since=since)
            scope = "keys of rows loaded by this run" if since is not None else "every row"
        nulls = null_keys(conn, table)
        yield AssetCheckResult(
            check_name=BLOCKING_CHECK,
            asset_key=key,
            passed=duplicates == 0 and nulls == 0,
            metadata={"duplicate_keys": duplicates, "null_keys": nulls, "checked": scope},
        )
    for link in links:
        if link.check_name in selected:
            if loaded_by is not None and since is None:  # materialized, but its loads wrote no row of it
                count, scope = 0, "no rows loaded by this run"
            else:
                count = orphans(conn, link.child, link.parent, link.on, touched_since=since)
                scope = "rows loaded by this run" if since is not None else "every row"
            yield AssetCheckResult(
                check_name=link.check_name,
                asset_key=key,
                passed=count == 0,
                metadata={"orphans": count, "checked": scope},
            )
    if "not_shrinking" in selected:
        yield _shrink_result(conn, table, rules.max_deleted_fraction, last_load)


def _first_load_time(conn: duckdb.DuckDBPyConnection, table: str, run_id: str) -> datetime | None:
    """When the first load of run `run_id` that wrote rows of `table` committed (its rows carry that load time
    or a later one), None when no load of the run wrote any. Not the table's newest load: a run whose load
    wrote no row of a table would then check every row loaded since some earlier run (a full sync: 10M rows)."""
    row = conn.execute(
        "SELECT min(committed_at) FROM lms._load_runs WHERE run_id = ? AND json_exists(tables, ?)",
        [run_id, f"$.{table}"],
    ).fetchone()
    return row[0] if row else None


def _materialized_in_this_run(context: AssetCheckExecutionContext, keys: list[AssetKey]) -> dict[AssetKey, Metadata]:
    """Of `keys`, those this run materialized (their link checks look only at the rows it loaded), with the
    metadata of their materialization."""
    if not keys:
        return {}
    run_id = context.run.run_id
    materialized = context.instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=10_000
    ).records
    wanted, found = set(keys), {}
    for record in materialized:
        materialization = record.event_log_entry.dagster_event.event_specific_data.materialization
        if materialization.asset_key in wanted:
            found[materialization.asset_key] = {k: v.value for k, v in materialization.metadata.items()}
    return found


def _contract_result(table: str, metadata: Metadata | None) -> AssetCheckResult:
    """Warns when this run's load of `table` met new fields or quarantined records; passes when it did not
    load the table (nothing seen, nothing to say)."""
    if metadata is None:
        return AssetCheckResult(
            check_name=CONTRACT_CHECK,
            asset_key=lms_key(table),
            passed=True,
            severity=AssetCheckSeverity.WARN,
            metadata={"checked": "not loaded by this run"},
        )
    new_fields, quarantined = int(metadata.get("new_fields") or 0), int(metadata.get("quarantined") or 0)
    new_columns = list(metadata.get("new_columns") or [])  # fields that became columns (contract/evolution.py)
    return AssetCheckResult(
        check_name=CONTRACT_CHECK,
        asset_key=lms_key(table),
        passed=not _contract_news(metadata),
        severity=AssetCheckSeverity.WARN,
        metadata={
            "new_fields": new_fields,
            "new_field_paths": metadata.get("new_field_paths") or [],
            "new_columns": new_columns,
            "quarantined_in_stream": quarantined,
            "next_step": "see lms.quarantine and the run's warnings; docs/exactness.md, 'Bad records'",
        },
    )


def _contract_news(metadata: Metadata) -> bool:
    """This run's load met new fields (kept in extra, or become columns) or quarantined records."""
    return bool(
        int(metadata.get("new_fields") or 0) or int(metadata.get("quarantined") or 0) or metadata.get("new_columns")
    )


def _shrink_result(
    conn: duckdb.DuckDBPyConnection, table: str, max_deleted_fraction: float, counts: dict[str, int]
) -> AssetCheckResult:
    live = row_count(conn, table)
    deleted, inserted = int(counts.get("deleted", 0)), int(counts.get("inserted", 0))
    before = live - inserted + deleted
    fraction = deleted / before if before else 0.0
    return AssetCheckResult(
        check_name="not_shrinking",
        asset_key=lms_key(table),
        passed=fraction <= max_deleted_fraction,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "live_rows": live,
            "live_rows_before_last_load": before,
            "deleted_by_last_load": deleted,
            "deleted_fraction": round(fraction, 4),
        },
    )


def check_rules(settings: OrchestrationSettings, links: Iterable[Link]) -> CheckRules:
    """The rules of every raw table's checks; `links`: what each domain declares."""
    return CheckRules(tuple(links), settings.max_deleted_fraction)


def build_webhook_table_checks(settings: OrchestrationSettings, links: Iterable[Link]) -> list[AssetChecksDefinition]:
    """The check step of the tables the webhooks fill (the raw sync's tables check themselves)."""
    return [webhook_checks_step(WEBHOOK_TABLES, check_rules(settings, links))]
