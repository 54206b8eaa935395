"""dbt's two references, `ref('<model>')` and `source('lms', '<table>')`, and the variable `var('as_of')`, without
Jinja.

A model's SQL reads `{{ ref('stg_answers') }}` and `{{ source('lms', 'answers') }}` as in any dbt project; they
compile to `analytics.stg_answers` and `lms.answers`, and the compiled SQL is what runs and what lineage is read
from (lineage.py). A YAML relationships test names its target the same way, without the braces. `{{ var('as_of') }}`
compiles to `getvariable('as_of')`, the DuckDB variable each build sets to its reference instant (build.py); dbt
reads the same text as the project variable of dbt_project.yml. Nothing else of Jinja is supported: any other `{{ }}`, `{% %}` or `{# #}` is refused with the file and line, rather than run as
SQL that means something else.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA, TableRef

_REF = re.compile(r"""ref\(\s*(?P<q>['"])(?P<model>[^'"]+)(?P=q)\s*\)""")
_SOURCE = re.compile(
    r"""source\(\s*(?P<q1>['"])(?P<source>[^'"]+)(?P=q1)\s*,\s*(?P<q2>['"])(?P<table>[^'"]+)(?P=q2)\s*\)"""
)
_VAR = re.compile(r"""var\(\s*(?P<q>['"])(?P<name>[^'"]+)(?P=q)\s*\)""")
# The dbt variables a model may read, each compiled to the DuckDB variable the build sets.
VARIABLES = {"as_of": "getvariable('as_of')"}
_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_OTHER_JINJA = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|#\}")
_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
SUPPORTED = f"{{{{ ref('<model>') }}}}, {{{{ source('{RAW_SCHEMA}', '<table>') }}}} and {{{{ var('as_of') }}}}"


def parse_call(text: str, where: str) -> TableRef:
    """`ref('x')` -> analytics.x, `source('lms', 'x')` -> lms.x; anything else is an error naming `where`."""
    call = text.strip()
    if (ref := _REF.fullmatch(call)) is not None:
        return TableRef(MODEL_SCHEMA, ref["model"])
    if (source := _SOURCE.fullmatch(call)) is None:
        raise ModelError(f"{where}: expected ref('<model>') or source('{RAW_SCHEMA}', '<table>') (got {call!r})")
    if source["source"] != RAW_SCHEMA:
        raise ModelError(
            f"{where}: unknown source {source['source']!r}; the one source is {RAW_SCHEMA!r} (sources.yml)"
        )
    return TableRef(RAW_SCHEMA, source["table"])


def compile_sql(text: str, path: Path) -> str:
    """The model's SQL with each `{{ ref(..) }}` / `{{ source(..) }}` replaced by the table it names, and each
    `{{ var(..) }}` by the DuckDB expression of that variable."""

    def substitute(match: re.Match[str]) -> str:
        where = f"{path}:{_line(text, match.start())}"
        if (var := _VAR.fullmatch(match.group(1).strip())) is not None:
            if var["name"] not in VARIABLES:
                raise ModelError(f"{where}: unknown variable {var['name']!r}; the variables are {sorted(VARIABLES)}")
            return VARIABLES[var["name"]]
        return qualified(parse_call(match.group(1), where))

    blanked = _EXPRESSION.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)  # keeps line numbers
    leftover = _OTHER_JINJA.search(blanked)
    if leftover is not None:
        raise ModelError(
            f"{path}:{_line(text, leftover.start())}: {leftover.group()!r}: only {SUPPORTED} are supported "
            f"(no other Jinja: no macros, no {{% if %}}); write the SQL out"
        )
    return _EXPRESSION.sub(substitute, text)


def qualified(ref: TableRef) -> str:
    """`schema.name` as SQL, quoted only where a plain identifier would not do."""
    return ".".join(
        part if _PLAIN_IDENTIFIER.fullmatch(part) else '"' + part.replace('"', '""') + '"'
        for part in (ref.schema, ref.name)
    )


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1
