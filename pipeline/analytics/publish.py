"""Publishing for analysts, who must be able to query while the next sync holds the warehouse.

DuckDB allows one read-write process per file and, while it holds the file, no reader from another process.
So after each build LessonSync publishes files that nobody writes in place, and each publish writes only what
changed since the last one:

- `data/published/`: Parquet files, each written once under a name that says what it holds (published_files.py):
  every raw table of schema `lms` (a large one as a base file and the rows changed since), and every published
  model as its last build (its version: the digest of the build's inputs). Columns whose name starts with `_` are
  a model's own bookkeeping (an incremental model's high-water mark) and are not published.
- `data/analytics.duckdb`: a small DuckDB file of views over those files, rewritten whole by every publish: the
  raw tables in schema `lms` (of the warehouse's own bookkeeping, tables named `_...`, only the load log
  `_load_runs`, copied as a table), every published analytics model in
  schema `main` (a model whose YAML says `publish: false` is left out), a staging view over the raw tables as its
  own view over the snapshot's `lms`, plus `_builds` (when, for which `as_of` and from which inputs each model was
  built) and `_published` (when this file was written); the descriptions as COMMENT ON each view and column.
  Written in DuckDB's v1.4.0 storage format to a temporary file in the same directory, then `os.replace`d: a
  reader that has the old file open keeps reading it, and the files its views read stay RETIRED_GRACE (24 hours)
  after the next publish replaced it; the next open sees the new one. Open it read-only. Its views name the files
  by absolute path: read it where LessonSync writes it (the same path on another machine or in a container).
  (In a file named analytics.duckdb, `analytics.<name>` would name the catalog and the schema both, an error in
  DuckDB: the models are in `main`.)
- `data/marts/<mart>.parquet`: one file per mart, written when the mart's version changed (temp file +
  `os.replace`), carrying its descriptions (comments.py: in each field's metadata, and all of them in the file's
  key-value metadata), and `_manifest.json` (what was published, when, row counts, versions). Each file is always whole;
  two marts read one after the other can come from two consecutive publishes: use the snapshot database when
  they must agree. Read a file through one open handle (`pq.read_table(open(path, "rb"))`): pyarrow's reader
  given a path opens it once for the footer and again for the data, and a publish in between pairs one file's
  footer with the next's pages.

A publish copies what the warehouse holds: a model whose last build failed is published as its previous build
(kept by build.py), and a model never built (or whose copy fails) is left out, said in `PublishResult.left_out`,
its previous Parquet file and manifest entry kept, so that one broken model never stops the others' publish.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.analytics.build import BUILDS_DESCRIPTION, BUILDS_TABLE
from pipeline.analytics.comments import (
    comment_statements,
    described_schema,
    execute_together,
    model_comment_statements,
)
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA
from pipeline.analytics.models import AnalyticsProject, Model
from pipeline.analytics.published_files import (
    PUBLISHED_DIR,
    RETIRED_GRACE,
    DataFilesOf,
    PublishedFiles,
    durable_replace,
)
from pipeline.analytics.sql import quote, relation, string_literal
from pipeline.warehouse import STORAGE_COMPATIBILITY_VERSION, content_version_ids, scalar

SNAPSHOT_FILE = "analytics.duckdb"
MARTS_DIR = "marts"
MANIFEST_FILE = "_manifest.json"
_ALIAS = "__publish"
_PARQUET_ROWS = 122_880  # rows per batch and row group (DuckDB's own row group size)
_BUILDS = BUILDS_TABLE.split(".")[1]  # its name, copied into the snapshot's main

log = logging.getLogger("lessonsync.analytics")


@dataclass(frozen=True)
class PublishResult:
    snapshot: Path
    parquet: dict[str, Path]  # mart -> file (written now or kept from a publish of the same version)
    rows: dict[str, int]  # model of the snapshot, and _builds -> rows
    published_at: datetime
    seconds: float
    seconds_by_table: dict[str, float]  # each model's view and, if it changed, its file
    left_out: dict[str, str]  # published model -> why it is not in this publish (never built, copy failed)
    written: dict[str, int] = field(default_factory=dict)  # file under data/published and data/marts -> bytes
    deleted: list[str] = field(default_factory=list)  # files under data/published retired for longer than the grace


def publish(
    conn: duckdb.DuckDBPyConnection,
    project: AnalyticsProject,
    data_dir: Path,
    *,
    rewrite: bool = False,
    grace: timedelta = RETIRED_GRACE,
    data_files_of: DataFilesOf | None = None,
) -> PublishResult:
    """Write the snapshot database and the marts' Parquet files from the warehouse, each file only where what it
    holds changed since the last publish (`rewrite`: every file anew); files no snapshot has referred to for
    `grace` are deleted. `data_files_of`: a raw table's Iceberg data files, linked where they hold its rows now
    (published_files.py) instead of writing them again."""
    started = time.perf_counter()
    published_at = datetime.now(UTC)
    left_out = _never_built(conn, project)
    data_dir.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(data_dir)
    files = PublishedFiles(data_dir, rewrite, data_files_of)
    files.remove_leftovers()
    snapshot = data_dir / SNAPSHOT_FILE
    models = [m for m in project.published if m.name not in left_out]
    rows, timings = _write_snapshot(conn, models, files, snapshot, published_at, left_out)
    deleted = files.retire_and_save(published_at, grace)
    marts_dir = data_dir / MARTS_DIR
    marts_dir.mkdir(parents=True, exist_ok=True)
    versions = _published_versions(conn)
    kept = _read_manifest(marts_dir / MANIFEST_FILE).get("marts", {})
    parquet: dict[str, Path] = {}
    written = {f"{PUBLISHED_DIR}/{path}": size for path, size in files.written.items()}
    for mart in project.marts:
        if mart.name in left_out:
            continue
        path = marts_dir / f"{mart.name}.parquet"
        if rewrite or kept.get(mart.name, {}).get("version") != versions[mart.name] or not path.exists():
            path = _write_parquet(conn, mart, marts_dir)
            written[f"{MARTS_DIR}/{path.name}"] = path.stat().st_size
        parquet[mart.name] = path
    _write_manifest(marts_dir, parquet, rows, versions, published_at, {m.name for m in project.marts})
    for name, why in left_out.items():
        log.warning("published without model %s: %s", name, why)
    return PublishResult(
        snapshot, parquet, rows, published_at, time.perf_counter() - started, timings, left_out, written, deleted
    )


def _never_built(conn: duckdb.DuckDBPyConnection, project: AnalyticsProject) -> dict[str, str]:
    """Published models with no relation in the warehouse (a new model whose first build failed), and why."""
    existing = {
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
            "AND table_schema = ?",
            [MODEL_SCHEMA],
        ).fetchall()
    }
    return {
        m.name: "never built in the warehouse (materialize it: its build says what is wrong)"
        for m in project.published
        if m.name not in existing
    }


def _write_snapshot(
    conn: duckdb.DuckDBPyConnection,
    models: list[Model],
    files: PublishedFiles,
    target: Path,
    at: datetime,
    left_out: dict[str, str],
) -> tuple[dict[str, int], dict[str, float]]:
    """The snapshot database of views over the published files (module docstring), which then replaces `target`;
    returns the rows of each model and of `_builds`, and the seconds each model took. A model whose files cannot be
    written (its previous view no longer reads the raw tables) is added to `left_out` and removed from `models`."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    rows: dict[str, int] = {}
    timings: dict[str, float] = {}
    conn.execute(
        f"ATTACH {string_literal(str(temp))} AS {_ALIAS} (STORAGE_VERSION {string_literal(STORAGE_COMPATIBILITY_VERSION)})"
    )
    try:
        _publish_raw_tables(conn, files)
        versions = _published_versions(conn)
        built_code = dict(conn.execute(f"SELECT model, code_version FROM {BUILDS_TABLE}").fetchall())
        for model in list(models):
            started = time.perf_counter()
            try:
                if _stays_a_view(model, built_code.get(model.name)):
                    select = model.sql.strip().rstrip(";")
                else:
                    columns = _published_columns(conn, model.name)
                    select = files.model_select(conn, MODEL_SCHEMA, model.name, versions[model.name], columns)
                conn.execute(f"CREATE VIEW {_ALIAS}.main.{quote(model.name)} AS\n{select}")
            except duckdb.Error as error:
                left_out[model.name] = f"its copy failed: {' '.join(str(error).split())}"
                models.remove(model)
                continue
            timings[model.name] = round(time.perf_counter() - started, 3)
        conn.execute(f"CREATE TABLE {_ALIAS}.main.{quote(_BUILDS)} AS SELECT * FROM {BUILDS_TABLE} ORDER BY model")
        conn.execute(f"CREATE TABLE {_ALIAS}.main._published AS SELECT ?::TIMESTAMPTZ AS published_at", [at])
        _describe_snapshot(conn, models)
        for name in [m.name for m in models]:
            rows[name] = int(scalar(conn, f"SELECT count(*) FROM {relation(MODEL_SCHEMA, name)}"))
        rows[_BUILDS] = int(scalar(conn, f"SELECT count(*) FROM {BUILDS_TABLE}"))
        conn.execute(f"CHECKPOINT {_ALIAS}")
    except BaseException:
        conn.execute(f"DETACH {_ALIAS}")
        _unlink(temp)
        raise
    conn.execute(f"DETACH {_ALIAS}")
    _replace(temp, target)
    return rows, timings


# The warehouse's bookkeeping tables in lms (cursors, the table registry, the Iceberg mirror's record, leftovers of
# an interrupted migration) describe LessonSync's state, not the platform's data: the snapshot keeps only the load
# log, which tells analysts when each stream's rows were loaded (described in the warehouse like the raw tables).
_PUBLISHED_BOOKKEEPING = frozenset({"_load_runs"})


def _publish_raw_tables(conn: duckdb.DuckDBPyConnection, files: PublishedFiles) -> None:
    """Schema lms of the snapshot: a view over the published files of each raw table (written where its rows
    changed since), and the load log copied (_PUBLISHED_BOOKKEEPING), with their comments."""
    conn.execute(f"CREATE SCHEMA {_ALIAS}.{RAW_SCHEMA}")
    relations = _relations(conn, _current_database(conn), RAW_SCHEMA)
    data = sorted(name for name in relations if not name.startswith("_"))
    versions = content_version_ids(conn, data)
    for name in data:
        select = files.raw_select(conn, RAW_SCHEMA, name, versions.get(name, "0"))
        conn.execute(f"CREATE VIEW {_ALIAS}.{RAW_SCHEMA}.{quote(name)} AS\n{select}")
    for name in sorted(set(relations) & _PUBLISHED_BOOKKEEPING):
        conn.execute(f"CREATE TABLE {_ALIAS}.{RAW_SCHEMA}.{quote(name)} AS SELECT * FROM {relation(RAW_SCHEMA, name)}")
    execute_together(conn, _raw_comment_statements(conn))


def _raw_comment_statements(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """The warehouse's comments on its raw tables and their columns, for their copies in the snapshot."""
    kinds = _relations(conn, _ALIAS, RAW_SCHEMA)
    statements = []
    for table, comment in conn.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ? "
        "AND comment IS NOT NULL UNION ALL SELECT view_name, comment FROM duckdb_views() WHERE "
        "database_name = current_database() AND schema_name = ? AND comment IS NOT NULL",
        [RAW_SCHEMA, RAW_SCHEMA],
    ).fetchall():
        if table in kinds:
            statements.append(
                f"COMMENT ON {kinds[table]} {_ALIAS}.{RAW_SCHEMA}.{quote(table)} IS {string_literal(comment)}"
            )
    for table, column, comment in conn.execute(
        "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = ? AND comment IS NOT NULL",
        [RAW_SCHEMA],
    ).fetchall():
        if table in kinds:
            statements.append(
                f"COMMENT ON COLUMN {_ALIAS}.{RAW_SCHEMA}.{quote(table)}.{quote(column)} IS {string_literal(comment)}"
            )
    return statements


def _relations(conn: duckdb.DuckDBPyConnection, database: str, schema: str) -> dict[str, str]:
    """TABLE or VIEW, for each relation of `database.schema`."""
    return dict(
        conn.execute(
            "SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = $db AND schema_name = $schema "
            "UNION ALL SELECT view_name, 'VIEW' FROM duckdb_views() WHERE database_name = $db "
            "AND schema_name = $schema AND NOT internal",
            {"db": database, "schema": schema},
        ).fetchall()
    )


def _current_database(conn: duckdb.DuckDBPyConnection) -> str:
    return str(scalar(conn, "SELECT current_database()"))


def _published_versions(conn: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Each built model's published version: the digest of its build's inputs, or, for a build recorded without
    them (dbt's), of when it was built and from which code."""
    return {
        model: inputs or hashlib.sha256(f"{built_at.isoformat()}|{code}".encode()).hexdigest()[:16]
        for model, inputs, built_at, code in conn.execute(
            f"SELECT model, inputs, built_at, code_version FROM {BUILDS_TABLE}"
        ).fetchall()
    }


def _published_columns(conn: duckdb.DuckDBPyConnection, model: str) -> list[tuple[str, str]]:
    """The model's columns but its bookkeeping ones (named `_...`), with their types."""
    return [
        (name, type_)
        for name, type_, *_ in conn.execute(f"DESCRIBE {relation(MODEL_SCHEMA, model)}").fetchall()
        if not name.startswith("_")
    ]


# The snapshot's own tables, described like the models.
_SNAPSHOT_TABLES = {
    _BUILDS: BUILDS_DESCRIPTION,
    "_published": ("When this file was published.", {"published_at": "When this file was written."}),
}


def _describe_snapshot(conn: duckdb.DuckDBPyConnection, models: list[Model]) -> None:
    """COMMENT ON every relation of the snapshot's main and its columns."""
    kinds = _relations(conn, _ALIAS, "main")
    columns: dict[str, list[str]] = {}
    for table, column in conn.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main'",
        [_ALIAS],
    ).fetchall():
        columns.setdefault(table, []).append(column)
    statements = [
        statement
        for model in models
        for statement in model_comment_statements(
            f"{_ALIAS}.main.{quote(model.name)}", kinds[model.name], model, columns.get(model.name, [])
        )
    ]
    for name, (about, described) in _SNAPSHOT_TABLES.items():
        statements += comment_statements(f"{_ALIAS}.main.{quote(name)}", "TABLE", about, described)
    execute_together(conn, statements)


_SESSION_VARIABLE = re.compile(r"\bgetvariable\s*\(", re.IGNORECASE)


def _stays_a_view(model: Model, built_code: str | None) -> bool:
    """Whether the model is published as its own view over the snapshot's raw tables: a view that reads only raw
    tables, whose warehouse build came from the code it has now (else its SQL is not the one built), and that reads
    no session variable (`as_of` is set only while models build; its file keeps the build's value)."""
    return (
        model.materialized == "view"
        and model.problem is None
        and all(dep.schema == RAW_SCHEMA for dep in model.deps)
        and built_code == model.code_version
        and not _SESSION_VARIABLE.search(model.sql)
    )


def _write_parquet(conn: duckdb.DuckDBPyConnection, mart: Model, marts_dir: Path) -> Path:
    """The mart as Parquet (zstd), its YAML descriptions as the file's and each field's Arrow metadata; written
    batch by batch (memory bounded by a row group, whatever the mart's size)."""
    target = marts_dir / f"{mart.name}.parquet"
    temp = marts_dir / f".{mart.name}.parquet.{uuid.uuid4().hex[:12]}.tmp"
    try:
        listed = ", ".join(quote(name) for name, _ in _published_columns(conn, mart.name))
        reader = conn.sql(f"SELECT {listed} FROM {relation(MODEL_SCHEMA, mart.name)}").to_arrow_reader(_PARQUET_ROWS)
        schema = described_schema(reader.schema, mart)
        with pq.ParquetWriter(temp, schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(
                    pa.RecordBatch.from_arrays(batch.columns, schema=schema), row_group_size=_PARQUET_ROWS
                )
    except BaseException:
        _unlink(temp)
        raise
    _replace(temp, target)
    return target


def _write_manifest(
    marts_dir: Path,
    parquet: dict[str, Path],
    rows: dict[str, int],
    versions: dict[str, str],
    at: datetime,
    marts: set[str],
) -> None:
    """The manifest of `parquet`, published now, and of the project's other marts (`marts`) the previous entry
    whose file is still there (a mart left out of this publish keeps what was published)."""
    manifest_path = marts_dir / MANIFEST_FILE
    previous: dict[str, Any] = _read_manifest(manifest_path).get("marts", {})
    for stale in set(previous) - marts:  # a mart removed from dbt_like_sql/
        _unlink(marts_dir / f"{stale}.parquet")
    kept = {
        name: entry
        for name, entry in previous.items()
        if name in marts and name not in parquet and (marts_dir / f"{name}.parquet").exists()
    }
    published = {
        name: {"file": path.name, "rows": rows[name], "version": versions[name]} for name, path in parquet.items()
    }
    manifest = {"published_at": at.isoformat(), "marts": {**kept, **published}}
    temp = manifest_path.with_name(f".{MANIFEST_FILE}.{uuid.uuid4().hex[:12]}.tmp")
    temp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    _replace(temp, manifest_path)


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return manifest
    except (OSError, ValueError):
        return {}


def _replace(temp: Path, target: Path) -> None:
    durable_replace(temp, target)


def _remove_leftovers(data_dir: Path) -> None:
    """Temporary files of a publish that was killed (only one publish runs at a time: pool `warehouse`)."""
    for pattern in (f".{SNAPSHOT_FILE}.*.tmp*", f"{MARTS_DIR}/.*.tmp"):
        for path in data_dir.glob(pattern):
            _unlink(path)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)
