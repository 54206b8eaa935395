"""A load process killed with SIGKILL between (or inside) its transactions: the warehouse's high-water
mark always matches the rows it holds, and the re-run ends with every event loaded exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import orjson
import pytest
from webhook_helpers import FUTURE, PAST, REPO, certificate

from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.load import high_water_mark, load_certificate_events

EVENTS = 1000
CHUNK = 5
LOADER = textwrap.dedent("""
    import logging, sys, duckdb
    from pipeline.webhooks.inbox import Inbox
    from pipeline.webhooks.load import load_certificate_events
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    with duckdb.connect(sys.argv[2]) as conn:
        load_certificate_events(conn, Inbox(sys.argv[1]), chunk_events=int(sys.argv[3]))
    print("finished", flush=True)
""")
COMPARED = "SELECT * EXCLUDE (first_loaded_at, last_loaded_at) FROM lms.{} ORDER BY ALL"


def fill_inbox(inbox: Inbox) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    inbox.append([
        to_delivery(
            orjson.dumps(certificate(f"c{n % 300}", PAST if n % 4 == 0 else FUTURE, f"2026-11-{n % 28 + 1:02d}T00:00Z",
                                     __v=n)),
            start + timedelta(seconds=n), "kill-test",
        )
        for n in range(EVENTS)
    ])
    assert inbox.count_events() == EVENTS


@pytest.mark.slow
def test_killed_load_leaves_mark_and_rows_together_and_the_rerun_is_exact(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    fill_inbox(inbox)
    warehouse = tmp_path / "warehouse.duckdb"
    loader = subprocess.Popen(
        [sys.executable, "-c", LOADER, str(inbox.path), str(warehouse), str(CHUNK)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    assert loader.stdout is not None
    progress = 0
    for line in loader.stdout:
        progress += "loaded up to inbox sequence" in line
        if progress == 10:  # well inside the run: 200 transactions in all
            loader.send_signal(signal.SIGKILL)
            break
    loader.wait(timeout=30)
    loader.stdout.close()
    assert loader.returncode == -signal.SIGKILL, "the loader finished before it could be killed"

    with duckdb.connect(str(warehouse)) as conn:
        mark = high_water_mark(conn, inbox.inbox_id() or "")
        assert CHUNK * 10 <= mark < EVENTS
        # Every event up to the mark, and none past it.
        assert conn.execute("SELECT count(*), max(sequence) FROM lms.certificate_events").fetchall() == [(mark, mark)]
        stats = load_certificate_events(conn, inbox)
        assert (stats.hwm_before, stats.events_loaded, stats.hwm_after) == (mark, EVENTS - mark, EVENTS)
        with duckdb.connect(str(tmp_path / "clean.duckdb")) as clean:
            load_certificate_events(clean, inbox)
            for table in ("certificate_events", "certificates"):
                query = COMPARED.format(table)
                assert conn.execute(query).fetchall() == clean.execute(query).fetchall()
