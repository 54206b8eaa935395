"""What a model's build is a function of, as digests, so that a build rebuilds only what changed (build.py).

- A raw table's version: the newest load that inserted, updated or deleted its rows (`<seq>-<load id>`,
  warehouse.content_version_ids: it moves exactly when the table's rows do; a load that only sees rows again
  moves nothing), and its columns.
- A model's inputs, in three digests. `code`: its SQL as rendered and its YAML, its materialization, the columns
  of the raw tables it reads and the `code` of the models it reads: every piece of code upstream of it. `inputs`:
  `code` and the data: the raw tables' versions, the `inputs` of the models it reads, and the build's `as_of` when
  the model reads it; a model that reads the clock gets a new one each build. `tested`: `inputs` and the versions
  of what its relationships tests read. A model whose `inputs` equal its last build's holds what a build would
  write (its tests are run again, on it, when only `tested` differs); an incremental model whose `code` equals its
  last build's saw only raw rows change since, the one case its incremental SQL is written for.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA
from pipeline.analytics.models import Model
from pipeline.warehouse import content_version_ids

NEVER_BUILT = "never-built"  # the inputs of a model the warehouse does not hold: what reads it is rebuilt


@dataclass(frozen=True)
class Fingerprint:
    code: str
    inputs: str  # the model's data version (Dagster's too)
    tested: str = ""  # `inputs` and what its tests read besides (relationships targets): its tests' outcome


@dataclass(frozen=True)
class RawVersions:
    """Per raw table: its content version ("0" when no load changed it) and a digest of its columns."""

    content: dict[str, str]
    columns: dict[str, str]

    def of(self, table: str) -> tuple[str, str]:
        return self.content.get(table, "0"), self.columns.get(table, "absent")


def raw_versions(conn: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> RawVersions:
    """The versions of the raw tables `tables` (schema lms) now."""
    wanted = sorted(set(tables))
    columns = {
        name: _digest(described)
        for name, described in conn.execute(
            "SELECT table_name, list(column_name || ' ' || data_type ORDER BY column_index) FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = ? AND table_name IN (SELECT unnest(?)) "
            "GROUP BY table_name",
            [RAW_SCHEMA, wanted],
        ).fetchall()
    }
    return RawVersions(content_version_ids(conn, wanted), columns)


def fingerprint(model: Model, raw: RawVersions, upstream: Mapping[str, Fingerprint], as_of: datetime) -> Fingerprint:
    """The model's digests with `upstream` (model name -> the digests of what the warehouse holds for it)."""
    missing = Fingerprint(NEVER_BUILT, NEVER_BUILT)
    models = sorted({d.name for d in model.deps if d.schema == MODEL_SCHEMA})
    tables = sorted({d.name for d in model.deps if d.schema == RAW_SCHEMA})
    code = _digest(
        {
            "code": model.code_version,
            "materialized": model.materialized,
            "unique_key": list(model.unique_key),
            "raw": {t: raw.of(t)[1] for t in tables},
            "models": {m: upstream.get(m, missing).code for m in models},
        }
    )
    data: dict[str, Any] = {
        "raw": {t: raw.of(t)[0] for t in tables},
        "models": {m: upstream.get(m, missing).inputs for m in models},
    }
    if model.time_relative:
        data["as_of"] = as_of.isoformat()
    if model.reads_clock:
        data["build"] = uuid.uuid4().hex  # its result is the build's own
    inputs = _digest({"code": code, "data": data})
    targets = sorted({t.to for t in model.tests if t.to is not None and t.to.name != model.name})
    tested = _digest(
        {
            "inputs": inputs,
            "targets": {
                str(t): (upstream.get(t.name, missing).inputs if t.schema == MODEL_SCHEMA else raw.of(t.name))
                for t in targets
            },
        }
    )
    return Fingerprint(code, inputs, tested)


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
