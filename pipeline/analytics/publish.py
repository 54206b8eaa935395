"""Publishing for analysts, who must be able to query while the next sync holds the warehouse.

DuckDB allows one read-write process per file and, while it holds the file, no reader from another process.
So after each successful build LessonSync publishes copies that nobody writes in place:

- `data/analytics.duckdb`: every published analytics model in schema `main` (a model whose YAML says
  `publish: false` is left out), plus `_builds` (when and for which `as_of` each model was built) and `_published`
  (when this file was written). It starts as a byte copy of the checkpointed warehouse file, so it holds the raw
  tables (schema `lms`) too, and a staging view over them stays a view there: copying a file costs what the disk
  does, where materializing the views would rewrite every answer. The other models are copied as tables, and the
  warehouse's schema `analytics` is dropped from the copy: in a file named analytics.duckdb, `analytics.<name>`
  would name the catalog and the schema both, an error in DuckDB. Of the warehouse's own bookkeeping in `lms`
  (tables named `_...`) only the load log `_load_runs` stays. Every table and column left carries its description
  as a comment. Written to a temporary file in the same directory, then `os.replace`d: a reader that has the old
  file open keeps reading it; the next open sees the new one. Open it read-only.
- `data/marts/<mart>.parquet`: one file per mart (temp file + `os.replace` each) carrying its descriptions
  (comments.py: in each field's metadata, and all of them in the file's key-value metadata), and `_manifest.json`
  (what was published, when, row counts). Each file is always whole; two marts read one after the other can
  come from two consecutive publishes: use the snapshot database when they must agree. Read a file through
  one open handle (`pq.read_table(open(path, "rb"))`): pyarrow's reader given a path opens it once for the
  footer and again for the data, and a publish in between pairs one file's footer with the next's pages.

A publish copies what the warehouse holds: a model whose last build failed is published as its previous build
(kept by build.py), and a model never built (or whose copy fails) is left out, said in `PublishResult.left_out`,
its previous Parquet file and manifest entry kept, so that one broken model never stops the others' publish.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
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
from pipeline.analytics.errors import ModelError
from pipeline.analytics.lineage import MODEL_SCHEMA, RAW_SCHEMA
from pipeline.analytics.models import AnalyticsProject, Model
from pipeline.analytics.sql import quote, relation, string_literal
from pipeline.warehouse import STORAGE_COMPATIBILITY_VERSION, insertion_order_not_kept, scalar

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
    parquet: dict[str, Path]  # mart -> file
    rows: dict[str, int]  # table in the snapshot -> rows
    published_at: datetime
    seconds: float
    seconds_by_table: dict[str, float]  # copying each table into the snapshot
    left_out: dict[str, str]  # published model -> why it is not in this publish (never built, copy failed)


def publish(conn: duckdb.DuckDBPyConnection, project: AnalyticsProject, data_dir: Path) -> PublishResult:
    """Write the snapshot database and the marts' Parquet files from the warehouse's analytics schema."""
    started = time.perf_counter()
    published_at = datetime.now(UTC)
    left_out = _never_built(conn, project)
    data_dir.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(data_dir)
    snapshot = data_dir / SNAPSHOT_FILE
    models = [m for m in project.published if m.name not in left_out]
    rows, timings = _write_snapshot(conn, models, snapshot, published_at, left_out)
    marts_dir = data_dir / MARTS_DIR
    marts_dir.mkdir(parents=True, exist_ok=True)
    parquet = {m.name: _write_parquet(conn, m, marts_dir) for m in project.marts if m.name not in left_out}
    _write_manifest(marts_dir, parquet, rows, published_at, {m.name for m in project.marts})
    for name, why in left_out.items():
        log.warning("published without model %s: %s", name, why)
    return PublishResult(snapshot, parquet, rows, published_at, time.perf_counter() - started, timings, left_out)


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
    conn: duckdb.DuckDBPyConnection, models: list[Model], target: Path, at: datetime, left_out: dict[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """A copy of the warehouse file holding `models` in schema main (module docstring), which then replaces
    `target`; returns the rows of each relation in main and the seconds each took. A model whose copy fails (its
    previous view no longer reads the raw tables) is added to `left_out` and removed from `models`."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    rows: dict[str, int] = {}
    timings: dict[str, float] = {}
    _copy_file_elsewhere(_checkpointed_file(conn), temp)
    conn.execute(f"ATTACH {string_literal(str(temp))} AS {_ALIAS}")
    try:
        _warn_if_newer_than_promised(conn)
        _clear_main(conn)
        built_code = dict(conn.execute(f"SELECT model, code_version FROM {BUILDS_TABLE}").fetchall())
        for model in list(models):
            started = time.perf_counter()
            try:
                if _stays_a_view(model, built_code.get(model.name)):
                    conn.execute(f"CREATE VIEW {_ALIAS}.main.{quote(model.name)} AS\n{model.sql.strip().rstrip(';')}")
                else:
                    _copy(conn, model.name, ordered=model.materialized != "view")
            except duckdb.Error as error:
                left_out[model.name] = f"its copy failed: {' '.join(str(error).split())}"
                models.remove(model)
                continue
            timings[model.name] = round(time.perf_counter() - started, 3)
        _copy(conn, _BUILDS, ordered=True)
        conn.execute(f"CREATE TABLE {_ALIAS}.main._published AS SELECT ?::TIMESTAMPTZ AS published_at", [at])
        conn.execute(f"DROP SCHEMA IF EXISTS {_ALIAS}.{quote(MODEL_SCHEMA)} CASCADE")
        _drop_bookkeeping(conn)
        _describe_snapshot(conn, models)
        for name in [m.name for m in models] + [_BUILDS]:
            rows[name] = int(scalar(conn, f"SELECT count(*) FROM {_ALIAS}.main.{quote(name)}"))
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


def _drop_bookkeeping(conn: duckdb.DuckDBPyConnection) -> None:
    """Drops from the copy every table of lms named `_...` but those in _PUBLISHED_BOOKKEEPING."""
    for (name,) in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? "
        "AND starts_with(table_name, '_')",
        [_ALIAS, RAW_SCHEMA],
    ).fetchall():
        if name not in _PUBLISHED_BOOKKEEPING:
            conn.execute(f"DROP TABLE {_ALIAS}.{quote(RAW_SCHEMA)}.{quote(name)}")


# The snapshot's own tables, described like the models.
_SNAPSHOT_TABLES = {
    _BUILDS: BUILDS_DESCRIPTION,
    "_published": ("When this file was published.", {"published_at": "When this file was written."}),
}


def _describe_snapshot(conn: duckdb.DuckDBPyConnection, models: list[Model]) -> None:
    """COMMENT ON every relation of the snapshot's main and its columns (the raw tables keep the warehouse's)."""
    kinds = dict(
        conn.execute(
            "SELECT view_name, 'VIEW' FROM duckdb_views() WHERE database_name = ? AND schema_name = 'main' "
            "AND NOT internal UNION ALL SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE database_name = ? "
            "AND schema_name = 'main'",
            [_ALIAS, _ALIAS],
        ).fetchall()
    )
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


def _warn_if_newer_than_promised(conn: duckdb.DuckDBPyConnection) -> None:
    """A warehouse created before its files were written in STORAGE_COMPATIBILITY_VERSION keeps its newer format,
    and so does its copy: say so, and how to get a readable one (a rebuild writes a new file)."""
    tags = scalar(conn, "SELECT tags FROM duckdb_databases() WHERE database_name = ?", [_ALIAS]) or {}
    version = str(tags.get("storage_version", ""))
    if version and not version.startswith(STORAGE_COMPATIBILITY_VERSION):
        log.warning(
            "the warehouse file is in DuckDB's %s storage format, so only DuckDB readers of that version open the "
            "published %s; `lessonsync rebuild` writes a warehouse in the %s format that DuckDB 1.4 reads",
            version,
            SNAPSHOT_FILE,
            STORAGE_COMPATIBILITY_VERSION,
        )


def _checkpointed_file(conn: duckdb.DuckDBPyConnection) -> Path:
    """The warehouse's file, every committed change written into it (no WAL left), so that a byte copy of it is
    the warehouse as committed. Nothing else writes meanwhile: a publish holds the warehouse pool."""
    path = scalar(conn, "SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
    if not path:
        raise ModelError(
            "cannot publish an in-memory warehouse: the snapshot starts as a copy of the warehouse "
            "file; open the warehouse from a file"
        )
    conn.execute("CHECKPOINT")
    wal = Path(f"{path}.wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ModelError(
            f"cannot publish: {wal} still holds changes after a CHECKPOINT (another connection of "
            "this process has a transaction open); publish when the warehouse is idle"
        )
    return Path(path)


def _copy_file_elsewhere(source: Path, target: Path) -> None:
    """`source` copied to `target` by a child process. Not here: DuckDB holds the warehouse's write lock as a POSIX
    record lock, which belongs to the process and goes the moment the process closes ANY descriptor of that file, as
    copying it would (another process could then open the warehouse while this one writes it)."""
    copier = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import shutil, sys; shutil.copyfile(*sys.argv[1:])",
            str(source),
            str(target),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if copier.returncode != 0:
        raise ModelError(f"cannot publish: copying {source} to {target} failed: {copier.stderr.strip()[-500:]}")


def _clear_main(conn: duckdb.DuckDBPyConnection) -> None:
    """Empties the copy's schema main (the warehouse keeps nothing there, unless someone created it by hand)."""
    for kind, name in conn.execute(
        "SELECT 'VIEW', view_name FROM duckdb_views() WHERE database_name = ? AND schema_name = 'main' "
        "AND NOT internal UNION ALL SELECT 'TABLE', table_name FROM duckdb_tables() WHERE database_name = ? "
        "AND schema_name = 'main'",
        [_ALIAS, _ALIAS],
    ).fetchall():
        conn.execute(f"DROP {kind} IF EXISTS {_ALIAS}.main.{quote(name)} CASCADE")


_SESSION_VARIABLE = re.compile(r"\bgetvariable\s*\(", re.IGNORECASE)


def _stays_a_view(model: Model, built_code: str | None) -> bool:
    """Whether the model is published as its own view over the raw tables of the copy: a view that reads only
    raw tables, whose warehouse build came from the code it has now (else its SQL is not the one built), and
    that reads no session variable (`as_of` is set only while models build; a copy keeps the build's value)."""
    return (
        model.materialized == "view"
        and model.problem is None
        and all(dep.schema == RAW_SCHEMA for dep in model.deps)
        and built_code == model.code_version
        and not _SESSION_VARIABLE.search(model.sql)
    )


def _copy(conn: duckdb.DuckDBPyConnection, name: str, *, ordered: bool) -> None:
    """The model `name` copied from the warehouse into the snapshot as a table. A view's rows have no order, so
    they are copied without keeping one, which lets DuckDB write on every core; a table keeps the order its SQL gave
    its rows (daily_activity is ordered by day)."""
    with nullcontext() if ordered else insertion_order_not_kept(conn):
        conn.execute(f"CREATE TABLE {_ALIAS}.main.{quote(name)} AS SELECT * FROM {relation(MODEL_SCHEMA, name)}")


def _write_parquet(conn: duckdb.DuckDBPyConnection, mart: Model, marts_dir: Path) -> Path:
    """The mart as Parquet (zstd), its YAML descriptions as the file's and each field's Arrow metadata; written
    batch by batch (memory bounded by a row group, whatever the mart's size)."""
    target = marts_dir / f"{mart.name}.parquet"
    temp = marts_dir / f".{mart.name}.parquet.{uuid.uuid4().hex[:12]}.tmp"
    try:
        reader = conn.sql(f"SELECT * FROM {relation(MODEL_SCHEMA, mart.name)}").to_arrow_reader(_PARQUET_ROWS)
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
    marts_dir: Path, parquet: dict[str, Path], rows: dict[str, int], at: datetime, marts: set[str]
) -> None:
    """The manifest of `parquet`, written now, and of the project's other marts (`marts`) the previous entry
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
    manifest = {
        "published_at": at.isoformat(),
        "marts": {**kept, **{name: {"file": path.name, "rows": rows[name]} for name, path in parquet.items()}},
    }
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
    """Durable atomic replacement: the data reaches the disk before the name points at it."""
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _remove_leftovers(data_dir: Path) -> None:
    """Temporary files of a publish that was killed (only one publish runs at a time: pool `warehouse`)."""
    for pattern in (f".{SNAPSHOT_FILE}.*.tmp*", f"{MARTS_DIR}/.*.tmp"):
        for path in data_dir.glob(pattern):
            _unlink(path)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)
