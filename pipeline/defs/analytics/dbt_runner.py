"""The models built by dbt through dagster-dbt, where LESSONSYNC_MODELS_RUNNER=dbt (docs/dbt.md): the same files,
the same asset keys (`analytics/<model>`, sources `lms/<table>`), group and owners, the YAML tests as asset checks
(dbt's test names), and `analytics/published` after it. LessonSync's own runner stays the default.

dbt runs as a subprocess in the models directory against the warehouse file (the example profiles.yml of the
models directory, given the warehouse's absolute path), holding the `warehouse` pool like every writer. Every path
handed to dbt is absolute and under the data directory (its target and logs: `<data dir>/dbt_target/`): dbt
resolves a relative one from the models directory, which it never writes into. After the build, each model dbt
built is counted and recorded in `analytics._builds` as LessonSync's runner records it, so the publish step and
the snapshot's `_builds` read the same facts whichever runner built the models, and each materialization carries
its `dagster/row_count` (dbt-duckdb reports none).

Needs the `dbt` extra (dagster-dbt, dbt-core, dbt-duckdb) and dbt_utils installed in the models directory
(`dbt deps`; offline, any package named dbt_utils providing the tests used). The manifest is parsed when the
code location loads, into the data directory (never into the models directory's target/)."""

# No `from __future__ import annotations`: Dagster reads the Config and resource annotations at runtime.

import json
import os
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    Failure,
    Output,
    multi_asset,
)
from dagster_dbt import (
    DagsterDbtCliRuntimeError,
    DagsterDbtTranslator,
    DagsterDbtTranslatorSettings,
    DbtCliResource,
    dbt_assets,
)

from pipeline.analytics import (
    BUILDS_COLUMNS,
    BUILDS_DDL,
    BUILDS_MIGRATIONS,
    BUILDS_TABLE,
    MODEL_SCHEMA,
    RAW_SCHEMA,
    AnalyticsProject,
    Model,
    relation,
)
from pipeline.defs.analytics.specs import GROUP, asset_spec
from pipeline.defs.policy import OWNERS, POOL
from pipeline.defs.resources import WarehouseResource

RUNNER_ENV = "LESSONSYNC_MODELS_RUNNER"
WAREHOUSE_ENV = "LESSONSYNC_WAREHOUSE_PATH"  # read by the example profiles.yml


class LessonSyncTranslator(DagsterDbtTranslator):
    """dbt's nodes under LessonSync's asset keys: a model is analytics/<model>, a source lms/<table>."""

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        schema = RAW_SCHEMA if dbt_resource_props["resource_type"] == "source" else MODEL_SCHEMA
        return AssetKey([schema, dbt_resource_props["name"]])

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return GROUP if dbt_resource_props["resource_type"] == "model" else None

    def get_owners(self, dbt_resource_props: Mapping[str, Any]) -> list[str] | None:
        return list(OWNERS)


def dbt_cli(project: AnalyticsProject) -> DbtCliResource:
    """dbt of this environment (beside its Python, else on PATH). Each invocation is given an absolute target
    path, which dagster-dbt makes dbt's log path too: nothing is written into the models directory."""
    beside = Path(sys.executable).with_name("dbt")
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    return DbtCliResource(
        project_dir=str(project.root),
        profiles_dir=str(project.root),
        dbt_executable=str(beside) if beside.exists() else "dbt",
    )


def parsed_manifest(project: AnalyticsProject, target: Path) -> Path:
    """`dbt parse` of the models directory into `target` (the code location's load: files only, no database)."""
    target.mkdir(parents=True, exist_ok=True)
    dbt_cli(project).cli(["parse", "--quiet"], target_path=target, raise_on_error=True).wait()
    return target / "manifest.json"


def dbt_models_asset(project: AnalyticsProject, target: Path, as_of_default: str | None) -> AssetsDefinition:
    """The models built by `dbt build`; `target` is an absolute path (dbt resolves a relative one from the
    models directory)."""
    if not target.is_absolute():
        raise ValueError(f"dbt's target path must be absolute (got {target})")
    try:
        manifest = parsed_manifest(project, target)
    except DagsterDbtCliRuntimeError as error:
        return _unparsed_models_asset(project, error)
    translator = LessonSyncTranslator(settings=DagsterDbtTranslatorSettings(enable_asset_checks=True))

    @dbt_assets(manifest=manifest, dagster_dbt_translator=translator, name="analytics_models_dbt", pool=POOL)
    def analytics_models_dbt(context: AssetExecutionContext, warehouse: WarehouseResource) -> Iterator[Any]:
        from pipeline.defs.analytics.assets import _parse_as_of  # the same default and parsing as our runner

        as_of = _parse_as_of(None, as_of_default)
        # dbt's own process opens the file: once this process's background mirror let go of it (warehouse())
        os.environ[WAREHOUSE_ENV] = str(warehouse.warehouse().path)
        variables = json.dumps({"as_of": f"'{as_of.isoformat()}'::timestamptz"})
        invocation = dbt_cli(project).cli(
            ["build", "--vars", variables], context=context, target_path=target, raise_on_error=False
        )
        # dbt's process holds the warehouse file until it ends (DuckDB: one writing process), so the rows of what
        # it built are counted after, and its events held until then to carry them
        events = list(invocation.stream())
        built = [
            project.models[r["unique_id"].split(".")[-1]]
            for r in invocation.get_artifact("run_results.json")["results"]
            if r["unique_id"].startswith("model.") and r["status"] == "success"
        ]
        with warehouse.connect() as conn:
            rows = _record_builds(conn, built, as_of)
        for event in events:
            yield _with_row_count(context, event, rows)
        if not invocation.is_successful():
            raise invocation.get_error() or RuntimeError("dbt build failed")

    return analytics_models_dbt


def _unparsed_models_asset(project: AnalyticsProject, error: DagsterDbtCliRuntimeError) -> AssetsDefinition:
    """When `dbt parse` fails, the code location still loads (its schedule, sensor and jobs with it): the models
    are assets as LessonSync reads them, and materializing them fails with dbt's error."""
    # dagster-dbt's message ends with the errors it read from dbt's log, after this line
    reason = " ".join(str(error).split("Errors parsed from dbt logs:")[-1].split())

    @multi_asset(
        name="analytics_models_dbt",
        specs=[asset_spec(m, project.root.parent, owners=list(OWNERS)) for m in project.models.values()],
        can_subset=True,
        pool=POOL,
        description=f"dbt could not parse {project.root}: the models cannot be built until it does.",
    )
    def analytics_models_dbt(context: AssetExecutionContext) -> Iterator[Any]:
        yield from ()  # a generator: Dagster reads a multi-asset's plain function as returning its outputs
        raise Failure(f"dbt parse of {project.root} failed: {reason}; fix it, then reload the code location")

    return analytics_models_dbt


def _record_builds(conn: duckdb.DuckDBPyConnection, built: list[Model], as_of: datetime) -> dict[str, int]:
    """Each model dbt built, counted and recorded in `analytics._builds` (no inputs: LessonSync's runner, if it
    builds next, builds each of them once); returns the rows of each."""
    for statement in (BUILDS_DDL, *BUILDS_MIGRATIONS):
        conn.execute(statement)
    rows: dict[str, int] = {}
    for model in built:
        rows[model.name] = conn.execute(f"SELECT count(*) FROM {relation(MODEL_SCHEMA, model.name)}").fetchall()[0][0]
        conn.execute(
            f"INSERT OR REPLACE INTO {BUILDS_TABLE} ({BUILDS_COLUMNS}) "
            "VALUES (?, ?, now(), ?, ?, ?, NULL, NULL, NULL, NULL)",
            [model.name, model.materialized, as_of, rows[model.name], model.code_version],
        )
    return rows


def _with_row_count(context: AssetExecutionContext, event: Any, rows: dict[str, int]) -> Any:
    """A model's materialization from dagster-dbt with the rows counted after the build (`dagster/row_count`,
    what the UI and `lessonsync sync`'s summary read); any other event as it is."""
    if isinstance(event, Output):
        key = context.asset_key_for_output(event.output_name)
    elif isinstance(event, AssetMaterialization):
        key = event.asset_key
    else:
        return event
    if key.path[0] != MODEL_SCHEMA or key.path[-1] not in rows:
        return event
    return event.with_metadata({**event.metadata, "dagster/row_count": rows[key.path[-1]]})
