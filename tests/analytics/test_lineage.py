"""Lineage read from the SQL matches the files, and the Dagster graph carries it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
from dagster import AssetKey
from sqlglot.tokens import Tokenizer, TokenType

from pipeline.analytics.models import DEFAULT_MODELS_DIR, AnalyticsProject
from pipeline.analytics.refs import parse_call
from pipeline.contract.tables import TABLES
from pipeline.defs.analytics.assets import PUBLISHED_KEY, build_analytics
from pipeline.settings import load_settings

ANALYTICS = build_analytics(load_settings())
analytics_models, analytics_checks = ANALYTICS.models, ANALYTICS.checks


def test_every_sql_file_is_one_model_with_its_yaml(project: AnalyticsProject) -> None:
    files = sorted(p for p in DEFAULT_MODELS_DIR.rglob("*.sql") if p.parent.name != "macros")
    assert (project.problems, project.rejected) == ({}, ())
    assert sorted(m.sql_path for m in project.models.values()) == files
    assert {p.stem for p in files} == set(project.models)
    for model in project.models.values():
        assert model.sql_path.with_suffix(".yml").exists(), f"{model.name} has no YAML beside it"
        assert model.description, f"{model.name}: its YAML has no description"
    assert {m.layer for m in project.models.values()} == {"staging", "intermediate", "marts"}


def _tables_in_parse_tree(node: object, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and node.get("schema_name"):  # unqualified ones are CTEs
            found.add(f"{node['schema_name']}.{node['table_name']}")
        for value in node.values():
            _tables_in_parse_tree(value, found)
    elif isinstance(node, list):
        for value in node:
            _tables_in_parse_tree(value, found)
    return found


def test_deps_match_duckdbs_own_parse_of_each_file(project: AnalyticsProject) -> None:
    # DuckDB's own parser (json_serialize_sql), independent of sqlglot, names the tables each compiled file reads.
    conn = duckdb.connect()
    for model in project.models.values():
        tree = json.loads(conn.execute("SELECT json_serialize_sql(?)", [model.sql]).fetchone()[0])
        assert tree["error"] is False, model.name
        assert {str(d) for d in model.deps} == _tables_in_parse_tree(tree, set()), model.name


REFERENCE = re.compile(r"\{\{ (ref\('\w+'\)|source\('lms', '\w+'\)) \}\}")
IMPORT_CTE = re.compile(r"\n(\w+) as (?:not materialized )?\(\n\n    select \* from \{\{ (.+?) \}\}\n\n\)")
LOGIC_CTE = re.compile(r"\n\w+ as \(\n\n    select\n")


def test_models_are_in_jaffle_shops_shape(project: AnalyticsProject) -> None:
    """Every table a model reads is named once, by ref()/source(), in an import CTE at the top
    (`<name> as (select * from {{ ref(..) }})`, `as not materialized (` where a big import is read twice), before any
    logic CTE; the model ends selecting from its last
    CTE (`final`; `renamed` in staging); every keyword is lowercase."""
    for model in project.models.values():
        text = model.sql_path.read_text()
        calls = REFERENCE.findall(text)
        assert sorted(str(parse_call(c, model.name)) for c in calls) == [str(d) for d in model.deps], model.name
        imports = IMPORT_CTE.findall(text)
        assert [call for _, call in imports] == calls, f"{model.name}: a reference outside an import CTE"
        logic = [m.start() for m in LOGIC_CTE.finditer(text)]
        assert logic and max(text.index(call) for call in calls) < min(logic), f"{model.name}: imports first"
        last = "renamed" if model.layer == "staging" else "final"
        assert re.search(rf"\nselect \* from {last}(\norder by \w+)?\n$", text), model.name
        tokens = Tokenizer().tokenize(model.sql)
        words = [model.sql[t.start : t.end + 1] for t in tokens if t.token_type != TokenType.STRING]
        upper = [w for w in words if w != w.lower()]
        assert not upper, f"{model.name}: {upper}"


def test_staging_models_rename_one_source(project: AnalyticsProject) -> None:
    for model in project.models.values():
        if model.layer == "staging":
            assert len(model.deps) == 1 and model.deps[0].schema == "lms", model.name


def test_some_deps_spelled_out(project: AnalyticsProject) -> None:
    deps = {name: {str(d) for d in m.deps} for name, m in project.models.items()}
    assert deps["stg_answers"] == {"lms.answers"}
    assert deps["lesson_funnel"] == {"analytics.learner_progress", "analytics.stg_lessons"}
    assert deps["certificates_by_badge"] == {"analytics.certificates"}
    assert deps["learner_progress"] == {
        "analytics.stg_active_lessons",
        "analytics.stg_answers",
        "analytics.stg_lesson_loads",
        "analytics.stg_lessons",
    }


def test_staging_reads_only_synced_tables_and_marts_only_models(project: AnalyticsProject) -> None:
    for model in project.models.values():
        schemas = {d.schema for d in model.deps}
        assert schemas == ({"lms"} if model.layer == "staging" else {"analytics"}), model.name


def test_build_order_puts_every_model_after_what_it_reads(project: AnalyticsProject) -> None:
    position = {name: i for i, name in enumerate(project.models)}
    for model in project.models.values():
        for dep in model.deps:
            if dep.schema == "analytics":
                assert position[dep.name] < position[model.name], (dep.name, model.name)


def test_sources_are_the_warehouse_tables(project: AnalyticsProject) -> None:
    synced = set(TABLES) - {"quarantine"}
    assert {"certificate_events", "certificates"} <= synced  # declared with the other tables
    assert set(project.sources) == synced


def test_dagster_asset_graph_follows_the_sql(project: AnalyticsProject) -> None:
    """Every model, and analytics/published after them, in the one subsettable step (so that a failed model does
    not stop the publish of the others: test_bulkhead.py)."""
    keys = {AssetKey(["analytics", name]) for name in project.models}
    assert set(analytics_models.keys) == keys | {PUBLISHED_KEY} and ANALYTICS.published is None
    for name, model in project.models.items():
        key = AssetKey(["analytics", name])
        assert analytics_models.asset_deps[key] == {AssetKey([d.schema, d.name]) for d in model.deps}
        spec = analytics_models.specs_by_key[key]
        assert spec.group_name == "analytics" and set(spec.kinds) == {"duckdb"}
        assert spec.code_version == model.code_version
    published = {AssetKey(["analytics", m.name]) for m in project.published}
    assert analytics_models.asset_deps[PUBLISHED_KEY] == published
    # an intermediate model says publish: false (what a mart counts, not for analysts)
    assert published == keys - {AssetKey(["analytics", "int_first_attempts"])}
    assert analytics_models.can_subset and analytics_models.op.pool == "warehouse"


def test_yaml_tests_become_asset_checks(project: AnalyticsProject) -> None:
    check_keys = {(k.asset_key.path[-1], k.name) for k in analytics_models.check_keys}
    expected = {(m.name, t.name) for m in project.models.values() for t in m.tests}
    assert check_keys == expected
    assert ("learner_progress", "unique__user_id__lesson_id") in check_keys
    assert ("stg_group_members", "relationships__user_id__stg_users") in check_keys
    assert ("stg_answers", "accepted_values__quiz_type") in check_keys
    assert ("stg_groups", "not_null__group_id") in check_keys
    assert [c.name for c in analytics_checks[0].check_specs] == ["published_files_consistent"]


def test_relationship_checks_depend_on_their_target(project: AnalyticsProject) -> None:
    spec = next(s for s in analytics_models.check_specs if s.name == "relationships__user_id__stg_users")
    assert [d.asset_key for d in spec.additional_deps] == [AssetKey(["analytics", "stg_users"])]


def test_models_dir_is_the_repository_folder() -> None:
    assert Path(__file__).resolve().parents[2] / "dbt_like_sql" == DEFAULT_MODELS_DIR
