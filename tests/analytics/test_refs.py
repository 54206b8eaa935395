"""dbt's ref() and source() compile to the tables they name; nothing else of Jinja gets through."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.analytics.errors import ModelError
from pipeline.analytics.refs import compile_sql, parse_call

PATH = Path("marts/m.sql")


def test_ref_and_source_compile_to_schema_qualified_tables() -> None:
    sql = (
        "with\n\nanswers as (\n\n    select * from {{ ref('stg_answers') }}\n\n),\n\n"
        'raw as (select * from {{source( "lms" , "answers" )}})\n\nselect * from answers'
    )
    assert compile_sql(sql, PATH) == (
        "with\n\nanswers as (\n\n    select * from analytics.stg_answers\n\n),\n\n"
        "raw as (select * from lms.answers)\n\nselect * from answers"
    )


def test_a_name_that_is_no_plain_identifier_is_quoted() -> None:
    assert compile_sql("select * from {{ ref('Odd-name') }}", PATH) == 'select * from analytics."Odd-name"'


def test_sql_without_jinja_is_left_as_written() -> None:
    sql = "select '{' as brace, x from lms.answers -- a comment"
    assert compile_sql(sql, PATH) == sql


@pytest.mark.parametrize(
    ("call", "expected"),
    [("ref('learner_progress')", "analytics.learner_progress"), ("source('lms', 'users')", "lms.users")],
)
def test_yaml_targets_parse_like_the_sql(call: str, expected: str) -> None:
    assert str(parse_call(call, "x.yml: to")) == expected


def test_var_as_of_compiles_to_the_builds_duckdb_variable() -> None:
    assert compile_sql("select {{ var('as_of') }} as as_of, {{var(\"as_of\")}}", PATH) == (
        "select getvariable('as_of') as as_of, getvariable('as_of')"
    )


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select 1\n\n{{ var('x') }}", "marts/m.sql:3: unknown variable 'x'; the variables are ['as_of']"),
        ("select 1\n\n{{ env_var('x') }}", "marts/m.sql:3: expected ref('<model>') or source('lms', '<table>')"),
        ("select 1 {# note #}", "marts/m.sql:1: '{#': only {{ ref('<model>') }}"),
        ("select {{ ref('a', 'b') }}", "got \"ref('a', 'b')\""),
        ("select {{ ref('a\") }}", "expected ref('<model>')"),
        ("select * from {{ source('other', 'x') }}", "unknown source 'other'; the one source is 'lms'"),
    ],
)
def test_anything_else_is_refused_naming_file_and_line(sql: str, expected: str) -> None:
    with pytest.raises(ModelError) as raised:
        compile_sql(sql, PATH)
    assert expected in str(raised.value)
