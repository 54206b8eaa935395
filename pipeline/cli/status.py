"""Show, per stream, how its last run ended (succeeded or failed, when, the error's first line), its cursor, the
rows its tables hold now, its last committed load, the records it quarantined, and whether it is fresh
(LESSONSYNC_FRESHNESS_HOURS); then the certificate inbox (depth, oldest event not loaded, what it quarantined).

    lessonsync status            # a table for people
    lessonsync status --json     # the same for scripts

Exits 1 when a stream is stale or its last run failed (0 otherwise), so cron and monitoring can act on it.
Loads come from the lake's manifests and runs from the Dagster instance, both readable while a sync runs; rows
come from the warehouse, or from the published snapshot while a sync holds the warehouse."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pipeline.cli.options import add_data_dir, settings_from

if TYPE_CHECKING:
    from pipeline.instance.runs import LastRun
    from pipeline.settings import Settings
    from pipeline.warehouse import StreamStatus
    from pipeline.webhooks.status import InboxStatus

CERTIFICATES = "certificates"  # the inbox stream as status names it (its loads: certificate_inbox_<inbox id>)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the lake, the warehouse, the inbox and the Dagster home are")
    parser.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")


def run(args: argparse.Namespace) -> int:
    report = collect(settings_from(args))
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print("\n".join(report.lines()))
    return 0 if report.ok else 1


@dataclass
class StreamReport:
    name: str
    load: StreamStatus
    rows: dict[str, int | None]  # each of its tables -> rows now (None: unknown)
    run: LastRun | None
    fresh: bool
    age: timedelta | None  # since the last load (the certificates: since the oldest event not loaded)

    @property
    def ok(self) -> bool:
        return self.fresh and (self.run is None or self.run.outcome != "failed")

    @property
    def freshness(self) -> str:
        if self.age is None:
            return "fresh" if self.fresh else "never"
        return f"{'fresh' if self.fresh else 'STALE'} ({self.age.total_seconds() / 3600:.1f} h)"


@dataclass
class StatusReport:
    checked_at: datetime
    freshness: timedelta
    streams: list[StreamReport]
    rows_source: str
    inbox: InboxStatus | None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.streams) and all(s.ok for s in self.streams)

    def lines(self) -> list[str]:
        if not self.streams:
            return [*self.notes, "no committed load and no run yet: run `lessonsync sync` first"]
        out = [
            f"{'stream':16} {'last run':36} {'cursor':26} {'last load':26} {'rows':>9} {'quarantined':>11}  freshness"
        ]
        for s in self.streams:
            run = f"{s.run.outcome} {when(s.run.at)}" if s.run else "-"
            where = when(s.load.cursor) if s.load.position is None else f"inbox sequence {s.load.position}"
            main = s.rows.get(s.name, sum(v or 0 for v in s.rows.values()) if s.rows else None)
            rows = f"{main:,}" if main is not None else "-"
            out.append(
                f"{s.name:16} {run:36} {where:26} {when(s.load.last_load_at):26} {rows:>9} "
                f"{s.load.quarantined:>11,}  {s.freshness}"
            )
            if s.run and s.run.outcome == "failed":
                out.append(f"{'':16} run {s.run.run_id} failed ({s.run.asset}): {s.run.error or 'no error recorded'}")
            if s.load.last_reset_at is not None:
                out.append(f"{'':16} cursor reset at {when(s.load.last_reset_at)}")
            out += [f"{'':16} {column}" for column in s.load.new_columns]
        out.append("")
        out.append(f"rows now ({self.rows_source}):")
        for s in self.streams:
            out.append(
                f"  {s.name:16} " + ", ".join(f"{t} {r:,}" if r is not None else f"{t} -" for t, r in s.rows.items())
            )
        if self.inbox is not None:
            i = self.inbox
            quarantined = ", ".join(f"{where} {n:,}" for where, n in i.quarantined.items())
            out.append("")
            out.append(
                f"certificate inbox {i.inbox_id or '-'}: loaded up to sequence {i.loaded_up_to}, {i.depth:,} not loaded "
                f"(oldest received {when(i.oldest_unloaded_at)}), quarantined: {quarantined}"
            )
            if i.quarantined.get("dead letters"):
                out.append(
                    f"certificate inbox: {i.quarantined['dead letters']} event(s) quarantined, not loaded (`lessonsync inbox list`)"
                )
        out.extend(self.notes)
        out.append("")
        out.append("OK" if self.ok else "NOT OK: " + ", ".join(s.name for s in self.streams if not s.ok))
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked_at": self.checked_at.isoformat(),
            "freshness_hours": self.freshness.total_seconds() / 3600,
            "rows_source": self.rows_source,
            "streams": [
                {
                    "stream": s.name,
                    "ok": s.ok,
                    "fresh": s.fresh,
                    "age_hours": round(s.age.total_seconds() / 3600, 3) if s.age is not None else None,
                    "last_run": None
                    if s.run is None
                    else {
                        "run_id": s.run.run_id,
                        "outcome": s.run.outcome,
                        "at": iso(s.run.at),
                        "asset": s.run.asset,
                        "error": s.run.error,
                    },
                    "cursor": iso(s.load.cursor),
                    "position": s.load.position,
                    "last_load_at": iso(s.load.last_load_at),
                    "last_load_run_id": s.load.last_run_id,
                    "loads": s.load.loads,
                    "quarantined": s.load.quarantined,
                    "cursor_reset_at": iso(s.load.last_reset_at),
                    "new_columns": s.load.new_columns,
                    "rows": s.rows,
                }
                for s in self.streams
            ],
            "inbox": None
            if self.inbox is None
            else {
                "inbox_id": self.inbox.inbox_id,
                "loaded_up_to": self.inbox.loaded_up_to,
                "depth": self.inbox.depth,
                "oldest_unloaded_at": iso(self.inbox.oldest_unloaded_at),
                "quarantined": self.inbox.quarantined,
            },
            "notes": self.notes,
        }


def collect(settings: Settings) -> StatusReport:
    """Everything the status shows, read from the lake, the Dagster instance, the warehouse and the inbox."""
    from pipeline.contract.tables import QUARANTINE, TABLES  # imported when the command runs: `--help` is instant
    from pipeline.warehouse import StreamStatus, live_table_rows, stream_statuses
    from pipeline.webhooks.status import inbox_status

    now = datetime.now(UTC)
    statuses = stream_statuses(settings.lake_location)
    table_rows = live_table_rows(settings.warehouse_path, settings.data_dir / "analytics.duckdb")
    inbox = inbox_status(settings.inbox_path, statuses, table_rows) if settings.inbox_path.exists() else None
    runs, notes = _last_runs(settings, [t for t in TABLES if t != QUARANTINE.name])

    named: dict[str, StreamStatus] = {}
    for status in statuses:
        if status.stream.startswith("certificate_inbox_"):
            if inbox is not None and status.stream != inbox.stream:
                continue  # an earlier inbox's loads: the current inbox's stream is the one that counts
            named[CERTIFICATES] = status
        else:
            named[status.stream] = status
    covered = {t for s in named.values() for t in s.tables}
    if inbox is not None and CERTIFICATES not in named:
        named[CERTIFICATES] = StreamStatus(CERTIFICATES, tables=("certificate_events", "certificates"))
        covered |= {"certificate_events", "certificates"}
    for table, last in runs.items():  # planned by a run, never loaded: its run's outcome is the news
        if table not in covered and last is not None:
            named[table] = StreamStatus(table, tables=(table,))

    reports = []
    for name, status in sorted(named.items()):
        tables = status.tables or ((CERTIFICATES,) if name == CERTIFICATES else (name,))
        if name == CERTIFICATES and inbox is not None:
            age = now - inbox.oldest_unloaded_at if inbox.oldest_unloaded_at else None
            fresh = age is None or age <= settings.freshness
        else:
            age = now - status.last_load_at if status.last_load_at else None
            fresh = age is not None and age <= settings.freshness
        reports.append(
            StreamReport(
                name,
                status,
                {t: table_rows.rows.get(t) for t in tables},
                _stream_run([runs.get(t) for t in tables]),
                fresh,
                age,
            )
        )
    return StatusReport(now, settings.freshness, reports, table_rows.source, inbox, notes)


def _last_runs(settings: Settings, tables: list[str]) -> tuple[dict[str, LastRun | None], list[str]]:
    """Each raw table's asset -> its last run, from the instance the syncs record their runs in."""
    from dagster import AssetKey

    from pipeline.instance.runs import instance_home, last_run, open_instance

    instance = open_instance(settings)
    if instance is None:
        return {}, [f"no Dagster instance in {instance_home(settings)}: run outcomes unknown"]
    with instance:
        return {table: last_run(instance, AssetKey(["lms", table])) for table in tables}, []


def _stream_run(runs: list[LastRun | None]) -> LastRun | None:
    """The stream's last run: the latest of its tables' last runs; failed if any table failed in that run."""
    known = [r for r in runs if r is not None]
    if not known:
        return None
    latest = max(known, key=lambda r: r.at or datetime.min.replace(tzinfo=UTC))
    failed = [r for r in known if r.run_id == latest.run_id and r.outcome == "failed"]
    return failed[0] if failed else latest


def when(value: datetime | None) -> str:
    """An instant as the status and reset lines show it: UTC, to the second; '-' when there is none."""
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else "-"


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else None
