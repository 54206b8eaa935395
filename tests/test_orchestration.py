"""The orchestration as Dagster evaluates it: schedule ticks at several instants (build_schedule_context +
evaluate_tick), the jobs the UI offers, the sensor's job, owners and step names, the backfill window, and the
settings `build_definitions` is given (load_settings: the environment or a `.env` file)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from dagster import EnvVar, Failure, RunRequest, build_resources, build_schedule_context

import pipeline.definitions
from pipeline.definitions import defs
from pipeline.defs.analytics.checks import PUBLISHED_KEY
from pipeline.defs.code_location import build_definitions
from pipeline.defs.lake.assets import MART_MIRROR_KEY, RAW_MIRROR_KEY
from pipeline.defs.policy import WRITES_WAREHOUSE
from pipeline.defs.progress.backfill import BackfillWindow
from pipeline.defs.selection import widen_to_whole_multi_assets
from pipeline.settings import load_settings

SCHEDULE, SENSOR = "nightly_sync_schedule", "certificate_inbox_sensor"

TICKS = [
    datetime(2026, 11, 24, 2, 0, tzinfo=UTC),  # an ordinary night
    datetime(2026, 1, 1, 0, 0, tzinfo=UTC),  # a day, month and year boundary
    datetime(2025, 1, 1, 2, 0, tzinfo=UTC),  # the first day the product knew (the old partitions' start)
    datetime(2028, 2, 29, 2, 0, tzinfo=UTC),  # a leap day
]


@pytest.mark.parametrize("tick", TICKS, ids=lambda t: t.isoformat())
def test_a_tick_asks_for_one_unpartitioned_nightly_run(tick: datetime) -> None:
    nightly_sync_schedule = defs.resolve_schedule_def(SCHEDULE)
    with build_schedule_context(scheduled_execution_time=tick) as context:
        result = nightly_sync_schedule.evaluate_tick(context)
    assert result.skip_message is None
    (request,) = result.run_requests or []
    assert isinstance(request, RunRequest)
    assert request.run_key == f"nightly-{tick:%Y-%m-%dT%H:%M}Z"
    assert request.partition_key is None  # the job is not partitioned: nothing for the Launchpad to ask either
    job = defs.resolve_job_def(nightly_sync_schedule.job_name)
    assert job.partitions_def is None
    assert {**WRITES_WAREHOUSE, "lessonsync/window": "cursor"}.items() <= job.run_tags.items()


def test_a_minute_cron_gets_a_run_per_tick_not_per_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LESSONSYNC_NIGHTLY_CRON", "* * * * *")
    schedule = build_definitions(load_settings()).resolve_schedule_def(SCHEDULE)
    assert schedule.cron_schedule == "* * * * *"
    keys = set()
    for minute in (0, 1):
        with build_schedule_context(scheduled_execution_time=datetime(2026, 11, 24, 2, minute, tzinfo=UTC)) as context:
            keys |= {r.run_key for r in schedule.evaluate_tick(context).run_requests or []}
    assert len(keys) == 2


def test_cron_and_sensor_interval_come_from_a_dotenv_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LESSONSYNC_NIGHTLY_CRON", "LESSONSYNC_CERTIFICATE_SENSOR_INTERVAL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".env").write_text("LESSONSYNC_NIGHTLY_CRON=15 3 * * *\nLESSONSYNC_CERTIFICATE_SENSOR_INTERVAL=7\n")
    monkeypatch.chdir(tmp_path)
    built = build_definitions(load_settings())
    assert built.resolve_schedule_def(SCHEDULE).cron_schedule == "15 3 * * *"
    assert built.resolve_sensor_def(SENSOR).minimum_interval_seconds == 7
    # Settings are passed in, never read behind the caller's back: the module's code location kept its own.
    assert defs.resolve_schedule_def(SCHEDULE).cron_schedule == "0 2 * * *"
    assert defs.resolve_sensor_def(SENSOR).minimum_interval_seconds == 30


def test_every_job_that_writes_carries_the_writer_tag_and_the_sensor_has_a_named_job() -> None:
    for name in ("nightly_sync", "full_refresh", "backfill_progress", "load_certificates"):
        assert WRITES_WAREHOUSE.items() <= defs.resolve_job_def(name).run_tags.items(), name
    assert "lessonsync/writes-warehouse" not in defs.resolve_job_def("check_warehouse").run_tags
    assert defs.resolve_sensor_def(SENSOR).job_name == "load_certificates"
    certificates_run = {
        key.to_user_string() for key in defs.resolve_job_def("load_certificates").asset_layer.executable_asset_keys
    }
    # The marts that read only certificates are rebuilt with them; nothing that needs a sync's tables.
    assert {"lms/certificates", "analytics/certificates", "analytics/certificates_by_badge"} <= certificates_run
    assert not {"analytics/daily_activity", "analytics/published", "lms/answers"} & certificates_run


def test_the_iceberg_mirror_is_a_step_of_its_own_after_the_raw_tables_in_every_job_that_loads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LESSONSYNC_TABLE_FORMAT", "iceberg")
    built = build_definitions(load_settings())
    graph = built.resolve_asset_graph()
    raw = {key for key in graph.get_all_asset_keys() if key.path[0] == "lms"}
    assert raw and raw <= graph.get(RAW_MIRROR_KEY).parent_keys  # the certificates too
    assert graph.get(MART_MIRROR_KEY).parent_keys == {PUBLISHED_KEY}
    assert not graph.get(RAW_MIRROR_KEY).child_keys and not graph.get(MART_MIRROR_KEY).child_keys
    for name in ("nightly_sync", "full_refresh", "backfill_progress", "load_certificates"):
        assert RAW_MIRROR_KEY in built.resolve_job_def(name).asset_layer.executable_asset_keys, name
    steps = {node.name for node in built.resolve_job_def("nightly_sync").graph.nodes}
    assert {"lms_raw", "certificates", "lake__iceberg_tables", "lake__iceberg_marts"} <= steps
    assert widen_to_whole_multi_assets(built, ["key:lms/answers"]).mirror == "lake/iceberg_tables"
    # off: no mirror asset at all
    assert not [key for key in defs.resolve_asset_graph().get_all_asset_keys() if key.path[0] == "lake"]


def test_every_asset_has_an_owner_and_every_step_an_explicit_name() -> None:
    graph = defs.resolve_asset_graph()
    unowned = [key.to_user_string() for key in graph.get_all_asset_keys() if not graph.get(key).owners]
    assert not unowned
    for name in ("nightly_sync", "__ASSET_JOB"):
        steps = [node.name for node in defs.resolve_job_def(name).graph.nodes]
        assert len(steps) == len(set(steps))
        assert not [s for s in steps if s.rsplit("_", 1)[-1].isdigit()], steps  # no `analytics_models_2`


def test_backfill_window_from_launchpad_config() -> None:
    assert BackfillWindow().window() is None  # unset: a cursor run
    with pytest.raises(Failure, match="a backfill needs its range: set resources.backfill.config.updated_from"):
        BackfillWindow().window(backfill_run=True)  # unset in a run tagged as a backfill: refused
    window = BackfillWindow(updated_from="2025-06-01", updated_to="2025-06-07").window()
    assert window is not None and not window.moves_cursor
    assert (window.since, window.until) == (datetime(2025, 6, 1, tzinfo=UTC), datetime(2025, 6, 8, tzinfo=UTC))
    assert "kept" in window.describe()  # the label says rows past the range end are kept
    open_ended = BackfillWindow(updated_from="2025-06-01").window()
    assert open_ended is not None and open_ended.until is not None and open_ended.until > datetime.now(UTC)
    for bad, message in [
        ({"updated_from": "June 1st"}, "updated_from='June 1st' is not a day"),
        ({"updated_to": "2025-06-07"}, "without updated_from"),
        ({"updated_from": "2025-06-07", "updated_to": "2025-06-01"}, "ends before it starts"),
    ]:
        with pytest.raises(Failure, match=message):
            BackfillWindow(**bad).window()


def test_python_m_pipeline_instance_creates_the_dagster_home_as_make_dev_does(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | {"LESSONSYNC_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.instance"], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    home = tmp_path / "dagster_home"
    assert done.stdout.strip() == str(home.resolve())
    shipped = Path(pipeline.definitions.__file__).parent / "instance" / "dagster.yaml"
    assert (home / "dagster.yaml").read_text() == shipped.read_text()


def test_a_secret_set_in_the_environment_reaches_the_resource_by_name_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the UI gets (the repository snapshot the webserver serves) names LESSONSYNC_APP_SECRET, never its value;
    unset, the secret is not in resource config at all (the resource reads the settings when a run starts)."""
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster_shared.serdes import serialize_value

    secret = "s3cret-value-never-shown"
    monkeypatch.setenv("LESSONSYNC_APP_SECRET", secret)
    built = build_definitions(load_settings())
    platform = built.resources["platform"]
    assert platform.app_secret == EnvVar("LESSONSYNC_APP_SECRET")
    with build_resources({"platform": platform}) as resources:  # what a run gets: the value, read at run start
        assert resources.platform.settings().app_secret.get_secret_value() == secret
    snapshot = serialize_value(RepositorySnap.from_def(built.get_repository_def()))
    assert "LESSONSYNC_APP_SECRET" in snapshot and secret not in snapshot

    monkeypatch.delenv("LESSONSYNC_APP_SECRET")
    assert build_definitions(load_settings()).resources["platform"].app_secret is None


def test_a_runs_resources_read_the_settings_once_when_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.defs.resources import PlatformResource, WarehouseResource

    monkeypatch.setenv("LESSONSYNC_PAGE_SIZE", "70")
    resources = {"warehouse": WarehouseResource(data_dir=str(tmp_path)), "platform": PlatformResource(concurrency=3)}
    with build_resources(resources) as initialized:
        monkeypatch.setenv("LESSONSYNC_PAGE_SIZE", "90")  # changed during the run: the run keeps what it started with
        for name in resources:
            first = getattr(initialized, name).settings()
            assert getattr(initialized, name).settings() is first and first.page_size == 70
        assert initialized.platform.settings().concurrency == 3
        assert initialized.warehouse.settings().data_dir == tmp_path
    assert PlatformResource().settings().page_size == 90  # outside a run: read when asked
