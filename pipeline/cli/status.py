"""Show, per stream, how its last run ended (succeeded or failed, when, the error's first line), its cursor, the
rows its tables hold now, its last committed load, the records it quarantined, and whether it is fresh
(LESSONSYNC_FRESHNESS_HOURS); then the certificate inbox (depth, oldest event not loaded, what it quarantined).

    lessonsync status            # a table for people
    lessonsync status --json     # one JSON document for scripts, whatever happens

Exit codes, as monitoring plugins (Nagios, Icinga, Prometheus' script exporters) read them:
    0 OK        every stream fresh and its last run succeeded (or running)
    1 NOT OK    a stream is stale or never loaded, or its last run failed: CRITICAL
    3 UNKNOWN   something needed to judge cannot be read (the Dagster instance, the lake, the inbox, the settings)
A known failure outranks an unknown: 1 is returned when a stream is NOT OK even if something else is unknown.
Loads come from the lake's manifests and runs from the Dagster instance, both readable while a sync runs; rows
come from the warehouse, or from the published snapshot while a sync holds the warehouse."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pipeline.cli.options import add_data_dir

if TYPE_CHECKING:
    from pipeline.instance.runs import LastRun
    from pipeline.settings import Settings
    from pipeline.warehouse import StreamStatus, TableRows
    from pipeline.webhooks import InboxStatus

CERTIFICATES = "certificates"  # the inbox stream as status names it (its loads: certificate_inbox_<inbox id>)
CERTIFICATE_TABLES = ("certificate_events", "certificates")
State = Literal["OK", "CRITICAL", "UNKNOWN"]
EXIT_CODES: dict[State, int] = {"OK": 0, "CRITICAL": 1, "UNKNOWN": 3}
NO_DELIVERIES = "no deliveries yet"  # the certificates of a platform that has sent no webhook: not a failure


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_data_dir(parser, "where the lake, the warehouse, the inbox and the Dagster home are")
    parser.add_argument("--json", action="store_true", help="print one JSON document (for scripts)")


def run(args: argparse.Namespace) -> int:
    try:
        report = collect(_settings(args))
    except Exception as error:  # noqa: BLE001 - whatever cannot be read, the answer is UNKNOWN in one line, never a trace
        report = StatusReport(datetime.now(UTC), None, [], "-", None, errors=[one_line(error)])
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print("\n".join(report.lines()))
    return EXIT_CODES[report.state]


class _BadSettings(Exception):
    """The settings do not validate (the message names each bad setting, never a secret's value)."""


def _settings(args: argparse.Namespace) -> Settings:
    from pipeline.cli.options import settings_from

    try:
        return settings_from(args)
    except SystemExit as stop:  # settings_from exits naming the bad settings: here that is an UNKNOWN to report
        raise _BadSettings(str(stop.code)) from None


@dataclass
class StreamReport:
    name: str
    load: StreamStatus
    rows: dict[str, int | None]  # each of its tables -> rows now (None: unknown)
    run: LastRun | None
    runs_known: bool  # False: the Dagster instance could not be read, the run's outcome is unknown
    freshness: str  # "fresh", "STALE", "never", NO_DELIVERIES, or "unknown" (the inbox could not be read)
    age: timedelta | None  # since the last load (the certificates: since the oldest event not loaded)

    @property
    def state(self) -> State:
        if (self.run is not None and self.run.outcome == "failed") or self.freshness in ("STALE", "never"):
            return "CRITICAL"
        if not self.runs_known or self.freshness == "unknown":
            return "UNKNOWN"
        return "OK"

    @property
    def ok(self) -> bool:
        return self.state == "OK"

    @property
    def fresh(self) -> bool:
        return self.freshness in ("fresh", NO_DELIVERIES)

    @property
    def freshness_text(self) -> str:
        if self.age is None:
            return self.freshness
        return f"{self.freshness} ({self.age.total_seconds() / 3600:.1f} h)"

    @property
    def last_run_text(self) -> str:
        if self.run is not None:
            return f"{self.run.outcome} {when(self.run.at)}"
        return "-" if self.runs_known else "unknown"


@dataclass
class StatusReport:
    checked_at: datetime
    freshness: timedelta | None  # None: the settings could not be read
    streams: list[StreamReport]
    rows_source: str
    inbox: InboxStatus | None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # what could not be read, one line each (makes it UNKNOWN)

    @property
    def synced(self) -> bool:
        """Whether any stream has a committed load or a recorded run (events waiting in the inbox are not a sync)."""
        return any(s.load.loads or s.run is not None for s in self.streams)

    @property
    def state(self) -> State:
        if not self.errors and not self.synced:
            return "CRITICAL"  # nothing loaded and no run recorded: nothing is fresh
        if any(s.state == "CRITICAL" for s in self.streams):
            return "CRITICAL"
        if self.errors or any(s.state == "UNKNOWN" for s in self.streams):
            return "UNKNOWN"
        return "OK"

    @property
    def ok(self) -> bool:
        return self.state == "OK"

    def verdict(self) -> str:
        state = self.state
        if state == "OK":
            return "OK"
        if state == "CRITICAL":
            failing = [s.name for s in self.streams if s.state == "CRITICAL"]
            return "NOT OK: " + (", ".join(failing) or "no committed load and no run yet")
        unknown = [f"{s.name} run outcome unknown" for s in self.streams if s.state == "UNKNOWN"]
        return "UNKNOWN: " + "; ".join(self.errors or unknown)

    def lines(self) -> list[str]:
        if not self.synced:
            hint = [] if self.errors else ["no committed load and no run yet: run `lessonsync sync` first"]
            return [*self.notes, *self._inbox_lines(), *hint, self.verdict()]
        out = [
            f"{'stream':16} {'last run':36} {'cursor':26} {'last load':26} {'rows':>9} {'quarantined':>11}  freshness"
        ]
        for s in self.streams:
            where = when(s.load.cursor) if s.load.position is None else f"inbox sequence {s.load.position}"
            main = s.rows.get(s.name, sum(v or 0 for v in s.rows.values()) if s.rows else None)
            rows = f"{main:,}" if main is not None else "-"
            out.append(
                f"{s.name:16} {s.last_run_text:36} {where:26} {when(s.load.last_load_at):26} {rows:>9} "
                f"{s.load.quarantined:>11,}  {s.freshness_text}"
            )
            if s.run and s.run.outcome == "failed":
                out.append(f"{'':16} {failure_text(s.run)}")
            if s.load.last_reset_at is not None:
                out.append(f"{'':16} cursor reset at {when(s.load.last_reset_at)}")
            out += [f"{'':16} {column}" for column in s.load.new_columns]
        out.append("")
        out.append(f"rows now ({self.rows_source}):")
        for s in self.streams:
            out.append(
                f"  {s.name:16} " + ", ".join(f"{t} {r:,}" if r is not None else f"{t} -" for t, r in s.rows.items())
            )
        inbox = self._inbox_lines()
        if inbox:
            out += ["", *inbox]
        out.extend(self.notes)
        if self.errors and self.state != "UNKNOWN":  # the UNKNOWN verdict says them itself
            out += [f"cannot read: {error}" for error in self.errors]
        out.append("")
        out.append(self.verdict())
        return out

    def _inbox_lines(self) -> list[str]:
        i = self.inbox
        if i is None:
            return []
        if i.inbox_id is None:
            return [f"certificate inbox {i.location}: {NO_DELIVERIES}"]
        quarantined = ", ".join(f"{where} {n:,}" for where, n in i.quarantined.items())
        out = [
            f"certificate inbox {i.inbox_id}: loaded up to sequence {i.loaded_up_to}, {i.depth:,} not loaded "
            f"(oldest received {when(i.oldest_unloaded_at)}), quarantined: {quarantined}"
        ]
        if i.quarantined.get("dead letters"):
            out.append(
                f"certificate inbox: {i.quarantined['dead letters']} event(s) quarantined, not loaded (`lessonsync inbox list`)"
            )
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.state,
            "exit_code": EXIT_CODES[self.state],
            "ok": self.ok,
            "error": "; ".join(self.errors) or None,
            "checked_at": self.checked_at.isoformat(),
            "freshness_hours": self.freshness.total_seconds() / 3600 if self.freshness is not None else None,
            "rows_source": self.rows_source,
            "streams": [
                {
                    "stream": s.name,
                    "status": s.state,
                    "ok": s.ok,
                    "fresh": s.fresh,
                    "freshness": s.freshness,
                    "age_hours": round(s.age.total_seconds() / 3600, 3) if s.age is not None else None,
                    "last_run": None
                    if s.run is None
                    else {
                        "run_id": s.run.run_id,
                        "outcome": s.run.outcome,
                        "at": iso(s.run.at),
                        "asset": s.run.asset,
                        "error": s.run.error,
                        "error_run_id": s.run.error_run_id,
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
                "location": self.inbox.location,
                "received_up_to": self.inbox.received,
                "loaded_up_to": self.inbox.loaded_up_to,
                "depth": self.inbox.depth,
                "oldest_unloaded_at": iso(self.inbox.oldest_unloaded_at),
                "quarantined": self.inbox.quarantined,
            },
            "notes": self.notes,
        }


def collect(settings: Settings) -> StatusReport:
    """Everything the status shows, read from the lake, the Dagster instance, the warehouse and the inbox; what
    cannot be read is an error line of the report, never an exception."""
    from pipeline.contract.tables import QUARANTINE, TABLES  # imported when the command runs: `--help` is instant
    from pipeline.warehouse import TableRows, live_table_rows, stream_statuses

    now = datetime.now(UTC)
    errors: list[str] = []
    try:
        statuses, lake_known = stream_statuses(settings.lake_location), True
    except Exception as error:  # noqa: BLE001 - an unreadable lake makes every freshness unknown, not a crash
        statuses, lake_known = [], False
        errors.append(f"the lake's load manifests cannot be read ({one_line(error)}): freshness unknown")
    try:
        table_rows = live_table_rows(settings.warehouse_path, settings.data_dir / "analytics.duckdb")
    except Exception as error:  # noqa: BLE001 - rows are shown, not judged
        table_rows = TableRows({}, f"unreadable: {one_line(error)}")
    inbox, inbox_error = _inbox(settings, statuses, table_rows)
    if inbox_error:
        errors.append(inbox_error)
    runs, runs_error = _last_runs(settings, [t for t in TABLES if t != QUARANTINE.name], loads=bool(statuses))
    if runs_error:
        errors.append(runs_error)

    named = _streams(statuses, inbox, inbox_unreadable=inbox_error is not None, runs=runs)
    reports = []
    for name, status in sorted(named.items()):
        if name == CERTIFICATES:
            freshness, age = _inbox_freshness(inbox, status, now, settings.freshness)
        else:
            freshness, age = _load_freshness(status, now, settings.freshness) if lake_known else ("unknown", None)
        tables = status.tables or (name,)
        rows = {t: table_rows.rows.get(t) for t in tables}
        run = _stream_run([runs.get(t) for t in tables])
        reports.append(StreamReport(name, status, rows, run, runs_error is None, freshness, age))
    return StatusReport(now, settings.freshness, reports, table_rows.source, inbox, errors=errors)


def _streams(
    statuses: list[StreamStatus], inbox: InboxStatus | None, *, inbox_unreadable: bool, runs: dict[str, LastRun | None]
) -> dict[str, StreamStatus]:
    """The streams to show, by name: those with loads (every inbox's loads as `certificates`), the certificates
    once anything of them is known, and tables a run planned that never loaded (their run's outcome is the news)."""
    from pipeline.warehouse import StreamStatus

    named: dict[str, StreamStatus] = {}
    for status in statuses:
        if not status.stream.startswith("certificate_inbox_"):
            named[status.stream] = status
        elif inbox is not None and inbox.inbox_id is not None:
            if status.stream == inbox.stream:  # an earlier inbox's loads do not count: the current inbox's do
                named[CERTIFICATES] = status
        elif CERTIFICATES not in named or _later(status, named[CERTIFICATES]):
            named[CERTIFICATES] = status  # the inbox unknown: its latest loads
    delivered = inbox is not None and (inbox.received > 0 or inbox.quarantined.get("inbox", 0) > 0)
    planned = any(runs.get(t) is not None for t in CERTIFICATE_TABLES)
    if CERTIFICATES not in named and (inbox_unreadable or delivered or planned):
        named[CERTIFICATES] = StreamStatus(CERTIFICATES, tables=CERTIFICATE_TABLES)
    covered = {t for s in named.values() for t in s.tables} | set(CERTIFICATE_TABLES)
    for table, last in runs.items():
        if table not in covered and last is not None:
            named[table] = StreamStatus(table, tables=(table,))
    return named


def _load_freshness(status: StreamStatus, now: datetime, window: timedelta) -> tuple[str, timedelta | None]:
    """A synced stream is fresh while its last load is younger than the window; never loaded: `never`."""
    if status.last_load_at is None:
        return "never", None
    age = now - status.last_load_at
    return ("fresh" if age <= window else "STALE"), age


def _later(status: StreamStatus, than: StreamStatus) -> bool:
    stamp = datetime.min.replace(tzinfo=UTC)
    return (status.last_load_at or stamp) > (than.last_load_at or stamp)


def _inbox(
    settings: Settings, statuses: list[StreamStatus], table_rows: TableRows
) -> tuple[InboxStatus | None, str | None]:
    """The certificate inbox of the settings (PostgreSQL with LESSONSYNC_INBOX_URL, else the SQLite file), or
    why it cannot be read."""
    from pipeline.cli.inbox import settings_inbox
    from pipeline.webhooks import inbox_status

    inbox = settings_inbox(settings)
    try:
        return inbox_status(inbox, statuses, table_rows), None
    except Exception as error:  # noqa: BLE001 - the inbox down makes the certificates' freshness unknown
        return None, f"the certificate inbox {inbox.location} cannot be read ({one_line(error)})"


def _inbox_freshness(
    inbox: InboxStatus | None, status: StreamStatus, now: datetime, window: timedelta
) -> tuple[str, timedelta | None]:
    """The certificates load only when deliveries arrive: STALE only when an event received longer ago than the
    freshness window is still not loaded; a platform that has sent nothing yet is not a failure."""
    if inbox is None:
        return "unknown", None
    if inbox.oldest_unloaded_at is not None:
        age = now - inbox.oldest_unloaded_at
        return ("fresh" if age <= window else "STALE"), age
    if inbox.received == 0 and not status.loads:
        return NO_DELIVERIES, None
    return "fresh", None


def _last_runs(settings: Settings, tables: list[str], *, loads: bool) -> tuple[dict[str, LastRun | None], str | None]:
    """Each raw table's asset -> its last run, from the instance the syncs record their runs in; or why the runs'
    outcomes are unknown (no instance where the lake has loads, an instance that cannot be read, or one that
    knows no run of any stream while the lake has their loads: the wrong DAGSTER_HOME)."""
    from pipeline.instance.runs import instance_home

    home = instance_home(settings)
    try:
        return _read_last_runs(settings, tables, loads=loads)
    except Exception as error:  # noqa: BLE001 - a garbage dagster.yaml or a corrupt runs.db: outcomes unknown
        return {}, (
            f"run outcomes unknown: the Dagster instance in {home} cannot be read ({one_line(error)}); "
            "repair its dagster.yaml or storage, or point DAGSTER_HOME at the home the syncs use"
        )


def _read_last_runs(
    settings: Settings, tables: list[str], *, loads: bool
) -> tuple[dict[str, LastRun | None], str | None]:
    from dagster import AssetKey

    from pipeline.instance.runs import instance_home, last_run, open_instance

    home = instance_home(settings)
    instance = open_instance(settings)
    if instance is None:
        if not loads:
            return {}, None  # nothing synced yet: the verdict says so
        return {}, (
            f"run outcomes unknown: no Dagster instance in {home} (no dagster.yaml); "
            "point DAGSTER_HOME at the home the syncs use"
        )
    with instance:
        runs = {table: last_run(instance, AssetKey(["lms", table])) for table in tables}
    if loads and all(last is None for last in runs.values()):
        return {}, (
            f"run outcomes unknown: the Dagster instance in {home} has no run of any stream, yet the lake has "
            "their loads; point DAGSTER_HOME at the home the syncs use"
        )
    return runs, None


def _stream_run(runs: list[LastRun | None]) -> LastRun | None:
    """The stream's last run: the latest of its tables' last runs; failed if any table failed in that run."""
    known = [r for r in runs if r is not None]
    if not known:
        return None
    latest = max(known, key=lambda r: r.at or datetime.min.replace(tzinfo=UTC))
    failed = [r for r in known if r.run_id == latest.run_id and r.outcome == "failed"]
    return failed[0] if failed else latest


def failure_text(run: LastRun) -> str:
    """The line under a failed stream: the run, the asset and the error, from the run it happened in."""
    error = run.error or "no error recorded"
    if run.error_run_id and run.error_run_id != run.run_id:
        return (
            f"run {run.run_id} failed ({run.asset}): interrupted retry of run {run.error_run_id}, which failed: {error}"
        )
    return f"run {run.run_id} failed ({run.asset}): {error}"


_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@", re.IGNORECASE)


def one_line(error: BaseException) -> str:
    """The error's class and first line, any URL password masked: what an operator needs, on one line."""
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    text = _URL_PASSWORD.sub(r"\g<scheme>***@", text)[:300]
    name = type(error).__name__
    return f"{name}: {text}" if text and not isinstance(error, _BadSettings) else text or name


def when(value: datetime | None) -> str:
    """An instant as the status and reset lines show it: UTC, to the second; '-' when there is none."""
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else "-"


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat(timespec="seconds") if value is not None else None
