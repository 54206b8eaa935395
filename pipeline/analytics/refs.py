"""dbt's two references as text: `ref('<model>')` and `source('lms', '<table>')`, as a YAML relationships test
names its target (`to: ref('stg_users')`), and the relation names they stand for (`analytics.stg_users`,
`lms.users`). Models themselves are rendered with Jinja (templating.py); when one cannot be rendered, the calls
written in its file are still read here, so that its asset keeps the dependencies that can be read.
"""

from __future__ import annotations

import re

from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA, TableRef

_REF = re.compile(r"""ref\(\s*(?P<q>['"])(?P<model>[^'"]+)(?P=q)\s*\)""")
_SOURCE = re.compile(
    r"""source\(\s*(?P<q1>['"])(?P<source>[^'"]+)(?P=q1)\s*,\s*(?P<q2>['"])(?P<table>[^'"]+)(?P=q2)\s*\)"""
)
# The variables a build sets, each rendered as the DuckDB expression reading it (build.py sets `as_of`).
VARIABLES = {"as_of": "getvariable('as_of')"}
_PLAIN_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


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


def calls_in_text(text: str) -> set[TableRef]:
    """Every `ref('<model>')` and `source('lms', '<table>')` written in `text` (other sources left out)."""
    found = {TableRef(MODEL_SCHEMA, m["model"]) for m in _REF.finditer(text)}
    found |= {TableRef(RAW_SCHEMA, m["table"]) for m in _SOURCE.finditer(text) if m["source"] == RAW_SCHEMA}
    return found


def qualified(ref: TableRef) -> str:
    """`schema.name` as SQL, quoted only where a plain identifier would not do."""
    return ".".join(
        part if _PLAIN_IDENTIFIER.fullmatch(part) else '"' + part.replace('"', '""') + '"'
        for part in (ref.schema, ref.name)
    )
