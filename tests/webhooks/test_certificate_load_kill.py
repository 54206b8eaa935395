"""A load process killed with SIGKILL between (or inside) its commits: the stream's position in the warehouse
always matches the rows it holds (before and after the roll-forward of a load whose manifest was written),
and the re-run ends with every event loaded exactly once."""

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

from pipeline.warehouse import Warehouse
from pipeline.webhooks.events import to_delivery
from pipeline.webhooks.inbox import Inbox
from pipeline.webhooks.load import load_certificate_events
from pipeline.webhooks.stream import high_water_mark, inbox_stream

EVENTS = 1000
CHUNK = 5
LOADER = textwrap.dedent("""
    import logging, sys
    from pathlib import Path
    from pipeline.warehouse import Warehouse
    from pipeline.webhooks.inbox import Inbox
    from pipeline.webhooks.load import load_certificate_events
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
    data = Path(sys.argv[2])
    warehouse = Warehouse(data / "warehouse.duckdb", data / "lake")
    load_certificate_events(warehouse, Inbox(sys.argv[1]), chunk_events=int(sys.argv[3]))
    print("finished", flush=True)
""")
COMPARED = "SELECT * EXCLUDE (first_loaded_at, last_loaded_at) FROM lms.{} ORDER BY ALL"


def fill_inbox(inbox: Inbox) -> None:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    inbox.append(
        [
            to_delivery(
                orjson.dumps(
                    certificate(
                        f"c{n % 300}", PAST if n % 4 == 0 else FUTURE, f"2026-11-{n % 28 + 1:02d}T00:00Z", __v=n
                    )
                ),
                start + timedelta(seconds=n),
                "kill-test",
            )
            for n in range(EVENTS)
        ]
    )
    assert inbox.count_events() == EVENTS


@pytest.mark.slow
def test_killed_load_leaves_mark_and_rows_together_and_the_rerun_is_exact(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite3")
    fill_inbox(inbox)
    data = tmp_path / "data"
    loader = subprocess.Popen(
        [sys.executable, "-c", LOADER, str(inbox.path), str(data), str(CHUNK)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
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

    stream = inbox_stream(inbox.inbox_id() or "")

    def position_and_rows() -> tuple[int, list[tuple[int, int]]]:
        with duckdb.connect(str(data / "warehouse.duckdb"), read_only=True) as conn:
            [(mark,)] = conn.execute("SELECT position FROM lms._sync_state WHERE stream = ?", [stream]).fetchall()
            return mark, conn.execute("SELECT count(*), max(sequence) FROM lms.certificate_events").fetchall()

    mark, rows = position_and_rows()  # DuckDB alone, before any roll-forward
    assert rows == [(mark, mark)]  # every event up to the position, and none past it
    warehouse = Warehouse(data / "warehouse.duckdb", data / "lake")
    warehouse.recover()  # a load whose manifest was written when the kill came is rolled forward, whole
    mark, rows = position_and_rows()
    assert rows == [(mark, mark)] and CHUNK * 10 <= mark < EVENTS
    assert high_water_mark(warehouse, inbox.inbox_id() or "") == mark
    stats = load_certificate_events(warehouse, inbox)
    assert (stats.hwm_before, stats.events_loaded, stats.hwm_after) == (mark, EVENTS - mark, EVENTS)
    clean = Warehouse(tmp_path / "clean" / "warehouse.duckdb", tmp_path / "clean" / "lake")
    load_certificate_events(clean, inbox)
    for table in ("certificate_events", "certificates"):
        with warehouse.connect(read_only=True) as conn, clean.connect(read_only=True) as clean_conn:
            assert (
                conn.execute(COMPARED.format(table)).fetchall() == clean_conn.execute(COMPARED.format(table)).fetchall()
            )
