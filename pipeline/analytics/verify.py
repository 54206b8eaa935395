"""Checking what was published, from the published files alone (the warehouse may be busy with a sync)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from pipeline.analytics.lineage import RAW_SCHEMA
from pipeline.analytics.models import AnalyticsProject
from pipeline.analytics.publish import MANIFEST_FILE, MARTS_DIR, SNAPSHOT_FILE
from pipeline.analytics.sql import quote
from pipeline.warehouse import scalar


def verify_published(project: AnalyticsProject, data_dir: Path) -> tuple[list[str], dict[str, int]]:
    """(problems found, rows per snapshot table); no problem means analysts can read every file."""
    snapshot = data_dir / SNAPSHOT_FILE
    if not snapshot.exists():
        return [f"{snapshot} does not exist: materialize analytics/published"], {}
    problems: list[str] = []
    rows: dict[str, int] = {}
    conn = duckdb.connect(str(snapshot), read_only=True)
    try:
        relations = {
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
            ).fetchall()
        }
        for name in (m.name for m in project.published):
            if name not in relations:
                problems.append(f"{snapshot}: model {name} is missing")
                continue
            try:
                rows[name] = scalar(conn, f"SELECT count(*) FROM {quote(name)}")
            except duckdb.Error as error:  # a file its view reads is gone or damaged
                problems.append(f"{snapshot}: model {name} is unreadable: {' '.join(str(error).split())}")
        problems += _check_raw_tables(snapshot, conn)
        problems += _check_parquet(project, data_dir / MARTS_DIR, rows, conn)
    finally:
        conn.close()
    return problems, rows


def _check_raw_tables(snapshot: Path, conn: duckdb.DuckDBPyConnection) -> list[str]:
    """Every raw table of the snapshot opens: the files its view reads are there (their footers are read)."""
    problems = []
    for (name,) in conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [RAW_SCHEMA]
    ).fetchall():
        try:
            conn.execute(f"SELECT * FROM {RAW_SCHEMA}.{quote(name)} LIMIT 0").fetchall()
        except duckdb.Error as error:
            problems.append(f"{snapshot}: raw table {name} is unreadable: {' '.join(str(error).split())}")
    return problems


def _check_parquet(
    project: AnalyticsProject, marts_dir: Path, rows: dict[str, int], conn: duckdb.DuckDBPyConnection
) -> list[str]:
    manifest_path = marts_dir / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))["marts"]
    except (OSError, ValueError, KeyError) as error:
        return [f"{manifest_path}: unreadable ({error})"]
    problems = []
    for mart in project.marts:
        path = marts_dir / f"{mart.name}.parquet"
        entry = manifest.get(mart.name)
        if entry is None or not path.exists():
            problems.append(f"{path}: not published")
            continue
        count = scalar(conn, "SELECT count(*) FROM read_parquet(?)", [str(path)])
        if count != entry["rows"]:
            problems.append(f"{path}: {count} rows but the manifest says {entry['rows']}")
        elif mart.name in rows and rows[mart.name] != count:
            # the snapshot and the Parquet files come from different publishes (one is being replaced)
            problems.append(f"{path}: {count} rows but the snapshot's {mart.name} has {rows[mart.name]}")
    return problems
