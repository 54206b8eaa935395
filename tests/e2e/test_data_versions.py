"""Dagster sees what changed: each raw table's materialization carries a data version (the seq of the newest load
that changed its rows), so a sync or a backfill that changed nothing leaves the staging models up to date, and one
that changed a table marks the models reading it stale.

Dagster's own rule for "Upstream data" (a model is stale when a dependency's current data version differs from
the one recorded on the model's last materialization, `dagster/input_data_version/<dep>`) is read from the
materialization events through the public instance API: the staleness resolver itself is private."""

from datetime import timedelta

import duckdb
import pytest
from dagster import AssetKey, DagsterInstance
from stack_helpers import RAW

from pipeline.stack import Stack, local_stack
from pipeline.sync import SyncReport

DATA_VERSION = "dagster/data_version"
INPUT_DATA_VERSION = "dagster/input_data_version/"


def _tags(instance: DagsterInstance, key: AssetKey) -> dict[str, str]:
    event = instance.get_latest_materialization_event(key)
    assert event is not None and event.asset_materialization is not None, key
    return dict(event.asset_materialization.tags or {})


def raw_versions(instance: DagsterInstance, report: SyncReport) -> dict[str, str]:
    """lms/<table> -> the data version its latest materialization carries."""
    assert report.success, report.error
    keys = [key for key in report.materializations if key.startswith("lms/")]
    return {key: _tags(instance, AssetKey(key.split("/")))[DATA_VERSION] for key in keys}


def stale_inputs(instance: DagsterInstance, versions: dict[str, str]) -> dict[str, list[str]]:
    """analytics/stg_* -> the raw tables whose current data version differs from the one it was built from."""
    stale: dict[str, list[str]] = {}
    for key in instance.get_asset_keys():
        if key.path[0] != "analytics" or not key.path[-1].startswith("stg_"):
            continue
        built_from = {
            tag[len(INPUT_DATA_VERSION) :]: value
            for tag, value in _tags(instance, key).items()
            if tag.startswith(INPUT_DATA_VERSION + "lms/")
        }
        assert built_from, f"{key.to_user_string()} recorded no raw input"
        changed = sorted(dep for dep, version in built_from.items() if versions[dep] != version)
        if changed:
            stale[key.to_user_string()] = changed
    return stale


PROGRESS = ("active_lessons", "answers", "answer_results")


def progress_rows(stack: Stack) -> tuple[dict[str, list[tuple]], int]:
    """Every row of the progress tables, load times included, and how many rows the newest load of them read
    again unchanged (its record in lms._load_runs)."""
    with duckdb.connect(str(stack.warehouse_path), read_only=True) as conn:
        rows = {table: conn.execute(f"SELECT * FROM lms.{table} ORDER BY ALL").fetchall() for table in PROGRESS}
        (unchanged,) = conn.execute(
            "SELECT sum(CAST(t.value ->> 'unchanged' AS BIGINT)) FROM lms._load_runs AS r, json_each(r.tables) AS t "
            "WHERE r.load_seq = (SELECT max(load_seq) FROM lms._load_runs WHERE stream = 'active_lessons')"
        ).fetchone() or (0,)
    return rows, int(unchanged or 0)


def _sync(stack: Stack, instance: DagsterInstance, **options: object) -> dict[str, str]:
    report = stack.sync(instance=instance, **options)
    return raw_versions(instance, report)


@pytest.mark.slow
def test_a_sync_or_backfill_that_changed_nothing_leaves_the_staging_models_up_to_date(tmp_path):
    instance = DagsterInstance.ephemeral()
    with local_stack(tmp_path / "data", scale="tiny") as stack:
        built = _sync(stack, instance)  # everything: the raw tables, then the models built from them
        assert stale_inputs(instance, built) == {}

        again = _sync(stack, instance, select=RAW)  # nothing changed on the platform
        assert again == built
        assert stale_inputs(instance, again) == {}

        before, _ = progress_rows(stack)
        end = stack.sim.now().date()
        backfill = _sync(
            stack,
            instance,
            select=("group:progress",),
            backfill_range=((end - timedelta(days=30)).isoformat(), end.isoformat()),
        )
        assert backfill.keys() == {"lms/active_lessons", "lms/answers", "lms/answer_results"}
        assert backfill == {key: built[key] for key in backfill}  # rows re-read, none changed
        after, read_again = progress_rows(stack)
        assert read_again > 0  # the backfill read rows again ...
        assert after == before  # ... and wrote none of them: every column as it was, last_loaded_at included
        assert stale_inputs(instance, {**built, **backfill}) == {}

        stack.advance(hours=24)  # the platform moves on: what changed is stale, what did not is not
        changed = _sync(stack, instance, select=RAW)
        moved = {key for key in changed if changed[key] != built[key]}
        assert {"lms/active_lessons", "lms/answers"} <= moved
        stale = stale_inputs(instance, changed)
        assert stale["analytics/stg_active_lessons"] == ["lms/active_lessons"]
        assert all(set(inputs) <= moved for inputs in stale.values())
