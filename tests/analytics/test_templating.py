"""Models are rendered with Jinja as dbt renders them (ref, source, this, var, config, is_incremental, the macros of
macros/, Jinja's own statements); anything else fails with the file and line, what was not understood, what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.analytics.errors import ModelError
from pipeline.analytics.refs import parse_call
from pipeline.analytics.templating import Templates


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A models directory with two macro files (one macro calling the other's) and a project variable."""
    (tmp_path / "macros").mkdir()
    (tmp_path / "macros" / "rates.sql").write_text(
        "{% macro rate(n, d) -%}\n    ({{ n }}) / {{ nonzero(d) }}\n{%- endmacro %}\n"
    )
    (tmp_path / "macros" / "guards.sql").write_text(
        "{% macro nonzero(x) %}nullif({{ x }}, 0){% endmacro %}\n"
        "{% macro from_users() %}from {{ ref('stg_users') }}{% endmacro %}\n"
    )
    (tmp_path / "dbt_project.yml").write_text("name: p\nvars:\n  min_learners: 2\n  as_of: current_timestamp\n")
    return tmp_path


def render(root: Path, text: str, name: str = "m"):  # type: ignore[no-untyped-def]
    return Templates(root).render(text, root / "marts" / f"{name}.sql", name)


def test_ref_and_source_render_as_schema_qualified_relations_and_are_recorded(root: Path) -> None:
    rendered = render(
        root,
        "with\n\nanswers as (\n\n    select * from {{ ref('stg_answers') }}\n\n),\n\n"
        'raw as (select * from {{source( "lms" , "answers" )}})\n\nselect * from answers',
    )
    assert rendered.sql == (
        "with\n\nanswers as (\n\n    select * from analytics.stg_answers\n\n),\n\n"
        "raw as (select * from lms.answers)\n\nselect * from answers"
    )
    assert {str(t) for t in rendered.calls} == {"analytics.stg_answers", "lms.answers"}


def test_a_name_that_is_no_plain_identifier_is_quoted(root: Path) -> None:
    assert render(root, "select * from {{ ref('Odd-name') }}").sql == 'select * from analytics."Odd-name"'


def test_sql_without_jinja_is_left_as_written(root: Path) -> None:
    sql = "select '{' as brace, x from lms.answers -- a comment"
    assert render(root, sql).sql == sql


def test_everyday_dbt_style_renders(root: Path) -> None:
    """config(), {% set %}, {% if %}, is_incremental(), this, var with a default and from dbt_project.yml, and
    macros of two files calling each other, one of them calling ref()."""
    rendered = render(
        root,
        "{{ config(materialized='table') }}\n"
        "{% set threshold = var('min_learners') %}\n"
        "select {{ rate('a', 'b') }} as r, '{{ this }}' as me, {{ var('as_of') }} as as_of,"
        " {{ var('missing', 7) }} as seven\n"
        "{{ from_users() }}\n"
        "{% if threshold > 1 %}where b >= {{ threshold }}{% endif %}\n"
        "{% if is_incremental() %}and a > (select max(a) from {{ this }}){% endif %}",
        name="dbt_style",
    )
    assert rendered.materialized == "table"
    assert rendered.sql.splitlines()[2:] == [
        "select (a) / nullif(b, 0) as r, 'analytics.dbt_style' as me, getvariable('as_of') as as_of, 7 as seven",
        "from analytics.stg_users",
        "where b >= 2",
    ]
    assert {str(t) for t in rendered.calls} == {"analytics.stg_users"}  # the macro's ref() is the model's


@pytest.mark.parametrize(
    ("call", "expected"),
    [("ref('learner_progress')", "analytics.learner_progress"), ("source('lms', 'users')", "lms.users")],
)
def test_yaml_targets_parse_like_the_sql(call: str, expected: str) -> None:
    assert str(parse_call(call, "x.yml: to")) == expected


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "select 1\n\n{{ var('x') }}",
            "m.sql:3: unknown variable 'x' (the variables are ['as_of', 'min_learners']); declare it under vars:",
        ),
        ("select 1\n\n{{ env_var('x') }}", "m.sql:3: 'env_var' is undefined: LessonSync's runner renders ref, source"),
        ("select 1\n{{ adapter.get_relation('a') }}", "m.sql:2: 'adapter' is undefined"),
        ("select {{ dbt_utils.star('a') }}", "m.sql:1: 'dbt_utils' is undefined"),
        ("select 1\n{% if %}", "m.sql:2: Expected an expression"),
        ("select {{ ref('a', 'b') }}", "m.sql:1: ref('a', 'b'): LessonSync's runner reads ref('<model>') only"),
        ("select * from {{ source('other', 'x') }}", "m.sql:1: unknown source 'other'; the one source is 'lms'"),
        ("{{ config(materialized='ephemeral') }}", "m.sql:1: config(materialized='ephemeral'): LessonSync's"),
        ("{{ config(unique_key=[]) }}", "m.sql:1: config(unique_key=...): expected a column name or a list"),
        (
            "{{ config(grants={'x': []}) }}",
            "m.sql:1: config(grants=...): LessonSync's runner reads config(materialized=",
        ),
        ("{{ config(tags=['x', 1]) }}", "m.sql:1: config(tags=...): expected a tag name or a list of tag names"),
        ("{{ config(meta=['x']) }}", "m.sql:1: config(meta=['x']): meta is a mapping"),
        (
            "{{ config(meta={'lessonsync': {'valid_untill': 'min(x)'}}) }}",
            "m.sql:1: config(meta={'lessonsync': {'valid_untill': 'min(x)'}}): LessonSync reads only",
        ),
        ("{{ config(meta={'lessonsync': {'valid_until': 3}}) }}", "valid_until is SQL text"),
        ("select\n{{ rate('a') }}", "m.sql:2 (in "),
    ],
)
def test_anything_else_is_refused_naming_file_line_and_what_to_do(root: Path, sql: str, expected: str) -> None:
    with pytest.raises(ModelError) as raised:
        render(root, sql)
    assert expected in str(raised.value)
    assert str(root / "marts" / "m.sql") in str(raised.value)


def test_a_broken_macro_file_fails_only_the_models_that_call_its_macros(root: Path) -> None:
    (root / "macros" / "broken.sql").write_text("{% macro broken() %}\n{% if %}\n{% endmacro %}\n")
    templates = Templates(root)
    assert templates.render("select {{ rate('a', 'b') }} as r", root / "m.sql", "m").sql == (
        "select (a) / nullif(b, 0) as r"
    )
    with pytest.raises(ModelError) as raised:
        templates.render("select 1 as x\n{{ broken() }}", root / "n.sql", "n")
    assert f"{root / 'n.sql'}:2: {root / 'macros' / 'broken.sql'}:2: Expected an expression" in str(raised.value)


def test_a_macro_defined_twice_is_refused_where_called(root: Path) -> None:
    (root / "macros" / "again.sql").write_text("{% macro nonzero(x) %}{{ x }}{% endmacro %}\n")
    with pytest.raises(ModelError, match="two macros named 'nonzero'; rename one"):
        render(root, "select {{ rate('a', 'b') }} as r")


def test_a_macro_replacing_one_of_dbts_functions_is_refused(root: Path) -> None:
    (root / "macros" / "mine.sql").write_text("{% macro ref(name) %}other.{{ name }}{% endmacro %}\n")
    with pytest.raises(ModelError, match="the macro 'ref' would replace dbt's ref\\(\\), which LessonSync's runner"):
        render(root, "select * from {{ ref('x') }}")


def test_meta_is_dbts_own_but_for_lessonsyncs_valid_until(root: Path) -> None:
    """dbt keeps config(meta=...) as written: any key but `lessonsync` is left alone; `valid_until` is read."""
    plain = render(root, "{{ config(meta={'owner': 'data team'}) }}select 1")
    assert plain.valid_until == ""
    ours = render(root, "{{ config(meta={'owner': 'x', 'lessonsync': {'valid_until': ' min(t) '}}) }}select 1")
    assert ours.valid_until == "min(t)"
