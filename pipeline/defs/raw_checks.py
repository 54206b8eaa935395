"""Asset checks on the raw tables: full unique keys, links between tables, and tables that shrink
unexpectedly. They run in three steps (one read-only connection each; see STEP_TABLES) after the assets they check,
not one per table: Dagster's per-step cost would be most of what a check step per table costs a no-change run.

They cost what the load cost, not what the table holds: after a run that loaded the table the key and link
checks look at the rows that run's loads wrote (pipeline.warehouse.checks explains why that finds every
duplicate key and every orphan a load can make). A run that did not load the table (the `check_warehouse`
job) checks every row.

Each domain declares the links of its tables (its checks.py); `build_raw_table_checks` makes the steps from
them and the settings (the share of rows one load may mark deleted). The steps span the domains on purpose: a
step per domain would pay the per-step cost again."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

import duckdb
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    DagsterEventType,
    multi_asset_check,
)

from pipeline.contract.tables import TABLES
from pipeline.defs.common import Metadata, lms_key
from pipeline.defs.directory.assets import GROUPS
from pipeline.defs.policy import POOL
from pipeline.defs.resources import WarehouseResource
from pipeline.settings import Settings
from pipeline.warehouse import duplicate_keys, null_keys, orphans, row_count
from pipeline.warehouse.catalog import catalog_unchanged
from pipeline.warehouse.checks import last_load_counts

CHECKED_TABLES = tuple(name for name, spec in TABLES.items() if spec.kind != "append")
CONTRACT_CHECK = "contract_unchanged"


@dataclass(frozen=True)
class Link:
    """Every live row of lms.<child> has its lms.<parent> row (a check of the child, named for the parent)."""

    child: str
    parent: str
    on: dict[str, str]  # child column -> parent column

    @property
    def check_name(self) -> str:
        return f"links_to_{self.parent}"


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
            "key_unique_not_null",
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
            description="This run's load saw no field the models do not declare and quarantined no "
            "record (warns: the platform's contract moved).",
        ),
    ]


# Named steps: `key_unique_not_null` of lms/active_lessons blocks the answers sync, which must therefore run
# between the check of active_lessons and the checks of the answers; one step for all would be split by Dagster
# into `check_raw_tables` and `check_raw_tables_2` (and the models after it into `analytics_models_2`).
# The groups' tables have a step of their own: their snapshot is the longest fetch of a quiet night (one listing
# per group), and a step checking them with the rest could start only after it. Apart, the other tables' checks
# run while the groups' pages still arrive (ready_first.py), and only the groups' few checks follow their commit.
_OWN_STEPS = {"check_active_lessons": ("active_lessons",), "check_directory": GROUPS.tables}
STEP_TABLES = {
    **_OWN_STEPS,
    "check_raw_tables": tuple(t for t in CHECKED_TABLES if not any(t in tables for tables in _OWN_STEPS.values())),
}


def raw_checks_step(name: str, tables: tuple[str, ...], rules: CheckRules) -> AssetChecksDefinition:
    @multi_asset_check(
        name=name,
        specs=[spec for t in tables for spec in table_check_specs(t, rules)],
        pool=POOL,
        can_subset=True,
        description=f"Key, link and shrink checks of {', '.join(f'lms.{t}' for t in tables)}: one "
        "step (and one read-only connection) for every selected check, after the assets it checks.",
    )
    def _checks(context: AssetCheckExecutionContext, warehouse: WarehouseResource) -> Iterator[AssetCheckResult]:
        selected: dict[str, set[str]] = {}
        for check_key in context.selected_asset_check_keys:
            selected.setdefault(check_key.asset_key.path[-1], set()).add(check_key.name)
        loaded = _materialized_in_this_run(context, [lms_key(t) for t in selected])
        with warehouse.warehouse().connect(read_only=True) as conn, catalog_unchanged(conn):
            last_loads = last_load_counts(conn, [t for t in tables if "not_shrinking" in selected.get(t, ())])
            for table in tables:  # declaration order: parents before their children
                if table in selected:
                    yield from _table_results(
                        conn,
                        table,
                        selected[table],
                        rules,
                        context.run.run_id if lms_key(table) in loaded else None,
                        last_loads.get(table, {}),
                    )
                    if CONTRACT_CHECK in selected[table]:
                        yield _contract_result(table, loaded.get(lms_key(table)))

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
    if "key_unique_not_null" in selected:
        if loaded_by is not None and since is None:  # materialized, but its loads wrote no row of it
            duplicates, scope = 0, "no rows loaded by this run"
        else:
            duplicates = duplicate_keys(conn, table, touched_since=since)
            scope = "keys of rows loaded by this run" if since is not None else "every row"
        nulls = null_keys(conn, table)
        yield AssetCheckResult(
            check_name="key_unique_not_null",
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
    return AssetCheckResult(
        check_name=CONTRACT_CHECK,
        asset_key=lms_key(table),
        passed=new_fields == 0 and quarantined == 0,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "new_fields": new_fields,
            "new_field_paths": metadata.get("new_field_paths") or [],
            "quarantined_in_stream": quarantined,
            "next_step": "see lms.quarantine and the run's warnings; docs/exactness.md, 'Bad records'",
        },
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


def build_raw_table_checks(settings: Settings, links: Iterable[Link]) -> list[AssetChecksDefinition]:
    """The checks of every raw table, in the steps of STEP_TABLES; `links`: what each domain declares."""
    rules = CheckRules(tuple(links), settings.max_deleted_fraction)
    return [raw_checks_step(name, tables, rules) for name, tables in STEP_TABLES.items()]
