"""Run the nightly sync now, in this process, without the Dagster daemon (for cron): every stream from its
cursor (or all of it with --full-refresh), certificates from the webhook inbox, then the analytics marts.
Prints what each table gained and exits non-zero when the run or a check fails; the run shows in the
Dagster UI like a scheduled one. A failed run is alerted to LESSONSYNC_ALERT_WEBHOOK_URL from here, daemon or not
(the daemon's failure sensor leaves in-process runs to their process): an alert that cannot be delivered is one
WARNING line, and the exit code stays the run's."""

from __future__ import annotations

import argparse
import textwrap
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.cli.options import add_base_url, add_data_dir, settings_from
from pipeline.cli.os_failures import os_failure
from pipeline.cli.stopping import Received, stop_promptly_on_signals
from pipeline.extras import require_extras_of
from pipeline.logs import print_result, without_class_path

if TYPE_CHECKING:
    from pipeline.raw.prefetch import Prefetch
    from pipeline.settings import Settings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("--full-refresh", action="store_true", help="ignore cursors and re-read every stream")
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="SELECTION",
        help="Dagster asset selection, e.g. 'group:progress' or 'key:lms/answers' (repeatable)",
    )
    add_data_dir(parser, "where the warehouse, lake and inbox are")
    add_base_url(parser)


def run(args: argparse.Namespace) -> int:
    from pipeline.memory import pause_collections

    pause_collections()  # until the run starts (pipeline.sync resumes them): the imports are for the process's life
    from pipeline.raw.prefetch import fetch_ahead  # Dagster-free, and light until its thread starts

    started = time.monotonic()
    settings = settings_from(args)
    require_extras_of(settings)  # a missing extra is one line now, not a run failing part-way (nor a prefetch)
    with stop_promptly_on_signals("sync") as stopped:
        # The run's first fetches start now, while Dagster is imported and the run is set up: its raw step adopts
        # them when it reads the same windows (pipeline/raw/prefetch.py). Not for a selection: which streams it
        # syncs is known only from the definitions.
        prefetch = None
        try:
            if not args.select:
                prefetch = fetch_ahead(settings, full_refresh=args.full_refresh)
                prefetch.started()  # its imports first: both sides hold the GIL, so the requests go out sooner
            return _run(args, settings, started, stopped, prefetch)
        except KeyboardInterrupt:  # stopped outside the run's steps (Dagster reports a stop within them)
            name = stopped.wait(1.0)
            if name is None:
                raise
            if prefetch is not None:  # said before the last line
                prefetch.discard(f"stopped by {name}")
            print_result(f"sync FAILED: stopped by {name} (the next sync starts from its cursors)", outcome="failed")
            return stopped.said(1)
        finally:
            if prefetch is not None:  # nothing left behind when the run ended before its raw step
                prefetch.discard("the run ended before its raw step")


def _run(
    args: argparse.Namespace, settings: Settings, started: float, stopped: Received, prefetch: Prefetch | None
) -> int:
    # Dagster is imported here, not at the top, so that `lessonsync sync --help` answers at once.
    from dagster import DagsterInstance

    from pipeline.cli.progress import live_progress
    from pipeline.instance import ensure_dagster_home
    from pipeline.sync import run_sync, sync_job_name

    try:
        select = _whole_multi_assets(settings, args.select)
    except ValueError as exc:
        print_result(f"lessonsync sync: {exc}", outcome="refused")
        return 2
    try:
        ensure_dagster_home(settings)
        instance = DagsterInstance.get()
        with live_progress():
            report = run_sync(
                settings,
                full_refresh=args.full_refresh,
                select=select,
                instance=instance,
                prefetch=prefetch,
                stopping=lambda: stopped.signal is not None,
            )
    except Exception as error:  # Dagster's own storage refused a write: the run cannot even be marked failed here
        problem = os_failure(error, settings)
        if problem is None:
            raise
        _alert(settings, None, sync_job_name(full_refresh=args.full_refresh), {}, problem)
        print_result(
            f"sync FAILED: {problem}; the run is marked failed by the next sync (or `lessonsync recover`)",
            outcome="failed",
            error=problem,
        )
        return 1
    if stopped.signal is not None and not report.success:
        report.error = f"stopped by {stopped.signal} (the run is marked failed; the next sync starts from its cursors)"
        report.step_errors = {}  # the steps' interruption is the stop, said above
    elif not report.success and report.error and (problem := os_failure(report.error, settings)):
        report.error = f"{problem} [{report.error.splitlines()[0][:300]}]"
    for line in summary_lines(report.materializations, report.models_up_to_date):
        print_result(line)
    for check in report.failed_checks:
        print_result(f"check failed: {check}", check=check)
    failed_run = report.failed_run_id or report.run_id
    if not report.success:
        _alert(settings, failed_run, report.job_name, report.step_errors, report.error or "the run failed")
    cause = without_class_path(report.error or "the run failed")  # the description: a person reads this line
    outcome = "succeeded" if report.success else f"FAILED: {cause}"
    seconds = time.monotonic() - started
    models_run = {} if report.models_run_id is None else {"models_run_id": report.models_run_id}
    print_result(
        f"sync {outcome} in {seconds:.1f} s (run {report.run_id})"
        + (f" (models run {report.models_run_id})" if report.models_run_id else ""),
        outcome="succeeded" if report.success else "failed",
        run_id=report.run_id,
        **models_run,
        seconds=round(seconds, 1),
        **({} if report.success else {"error": cause}),
    )
    return stopped.said(0 if report.success else 1)


def _alert(settings: Settings, run_id: str | None, job: str, step_errors: dict[str, str], error: str) -> None:
    """The failure alert, sent from this process (no daemon needed); a delivery failure is a warning line only."""
    from pipeline.defs.operations.alerts import alert_failed_sync

    warning = alert_failed_sync(run_id, job, step_errors, error, settings)
    if warning:
        print_result(warning)


def _whole_multi_assets(settings: Settings, select: list[str]) -> list[str]:
    """The selection widened to the assets fetched together with a selected one, said on the console."""
    if not select:
        return select
    from pipeline.defs.selection import widen_to_whole_multi_assets
    from pipeline.sync import definitions_for

    widened = widen_to_whole_multi_assets(definitions_for(settings), select)
    for key, neighbours in widened.added.items():
        print_result(f"selection widened: {key} is fetched together with {', '.join(neighbours)}, which run with it")
    if widened.mirror is not None:
        print_result(f"selection widened: {widened.mirror} mirrors the raw tables loaded, after them")
    return widened.select


def summary_lines(materializations: Mapping[str, Mapping[str, object]], up_to_date: int = 0) -> list[str]:
    """One line per asset that loads rows (synced tables, certificates), then the models' build in a few lines;
    `up_to_date`: models the run left out, their inputs unchanged since their last build."""
    lines, models, unchanged = [], [], up_to_date
    for key, metadata in sorted(materializations.items()):
        fetched = metadata.get("rows_fetched", metadata.get("events_loaded"))
        if key.startswith("lake/"):  # the Iceberg mirror: its raw step's background writes, then the step's own
            lists = [metadata.get("background_tables_written"), metadata.get("tables_written")]
            written = dict.fromkeys(str(name) for listed in lists if isinstance(listed, list) for name in listed)
            lines.append(f"{key:32} Iceberg tables written: {', '.join(written) or 'none'}")
            continue
        if fetched is None:  # not a load: an analytics model, or the published copy (which is no model)
            if "published_at" in metadata:  # it names the models skipped, their inputs unchanged since their build
                kept = metadata.get("models_unchanged")
                unchanged += len(kept) if isinstance(kept, list) else 0
            else:
                rows = metadata.get("dagster/row_count")
                models.append(f"{key.split('/')[-1]} {rows:,}" if isinstance(rows, int) else f"{key.split('/')[-1]} ?")
            continue
        lines.append(
            f"{key:32} fetched {fetched!s:>10}  inserted {metadata.get('rows_inserted', '-')!s:>9}  "
            f"updated {metadata.get('rows_updated', '-')!s:>9}  deleted {metadata.get('rows_deleted', '-')!s:>7}"
            f"  rows now {metadata.get('dagster/row_count', '-')!s:>10}"
        )
    for key, metadata in sorted(materializations.items()):
        # certificates: events the loader set aside (both of its tables carry the count; said once)
        if key.endswith("/certificate_events") and metadata.get("quarantined_in_inbox"):
            lines.append(
                f"{key:32} WARNING {metadata['quarantined_in_inbox']} inbox event(s) quarantined: "
                "see `lessonsync inbox list`"
            )
    if models:
        lines += textwrap.wrap(
            f"models built: {len(models)} (rows) " + ", ".join(models), width=110, subsequent_indent="  "
        )
    if unchanged:
        lines.append(f"models unchanged since their last build (inputs the same): {unchanged}")
    return lines
