"""One writer at a time: a real second process holding the DuckDB file gives a clear WarehouseLockedError."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from warehouse_helpers import ANSWERS, T0, answer, load_once, make_warehouse

from pipeline.cli import main as lessonsync
from pipeline.settings import Settings
from pipeline.warehouse import Warehouse, WarehouseLockedError
from pipeline.warehouse.duck import connection
from pipeline.warehouse.lake.lake import list_manifests

# Holds the file open read-write until its stdin closes.
HOLDER = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('holding', flush=True); sys.stdin.read()"


@contextmanager
def held(path: Path) -> Iterator[subprocess.Popen[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        yield holder
    finally:
        if holder.stdin is not None and not holder.stdin.closed:
            holder.stdin.close()
        holder.wait(timeout=30)


def test_another_process_holding_the_file_gets_a_clear_error(seeded: Warehouse) -> None:
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])], cursor=T0)
    with held(seeded.path) as holder:
        for read_only in (False, True):
            with pytest.raises(WarehouseLockedError) as caught, seeded.connect(read_only=read_only):
                pass
            message = str(caught.value)
            assert str(seeded.path) in message and f"PID {holder.pid}" in message
            assert "wait for the running sync or rebuild to finish" in message
            assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no DuckDB traceback soup
        lake_before = sorted(seeded.lake_dir.rglob("*"))
        with pytest.raises(WarehouseLockedError):
            load_once(seeded, "answers", [(ANSWERS, [answer("a2", "q1")])], cursor=T0)
        assert sorted(seeded.lake_dir.rglob("*")) == lake_before  # the failed load left no parts behind
    retried = load_once(seeded, "answers", [(ANSWERS, [answer("a2", "q1")])], cursor=T0)
    assert retried.seq == 2 and [seq for seq, _ in list_manifests(seeded.lake_dir)] == [1, 2]


def test_a_writer_waits_for_the_lock_up_to_its_timeout(tmp_path: Path) -> None:
    patient = make_warehouse(tmp_path, lock_timeout=60.0)
    patient.ensure_tables([ANSWERS])
    with held(patient.path) as holder:
        assert holder.stdin is not None
        threading.Timer(0.5, holder.stdin.close).start()  # the other process finishes a moment later
        result = load_once(patient, "answers", [(ANSWERS, [answer("a1", "q1")])])
    assert result.tables["answers"].inserted == 1


def test_cli_reports_a_locked_warehouse_without_a_traceback(
    seeded: Warehouse, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    load_once(seeded, "answers", [(ANSWERS, [answer("a1", "q1")])])
    monkeypatch.setenv("LESSONSYNC_DUCKDB_LOCK_TIMEOUT", "0")
    with held(seeded.path):
        code = lessonsync(["rebuild", "--data-dir", str(seeded.path.parent)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"lessonsync rebuild: warehouse {seeded.path} is locked by another process")
    assert "Traceback" not in err


def test_a_writer_waiting_for_the_lock_names_the_holder_while_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(connection, "LOCK_REPORT_EVERY_SECONDS", 0.3)  # 30 s in production
    patient = make_warehouse(tmp_path, lock_timeout=60.0)
    patient.ensure_tables([ANSWERS])
    caplog.set_level(logging.WARNING, logger="lessonsync.warehouse")
    with held(patient.path) as holder:
        assert holder.stdin is not None
        threading.Timer(1.0, holder.stdin.close).start()
        load_once(patient, "answers", [(ANSWERS, [answer("a1", "q1")])])
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting for PID")]
    assert waits and all(f"PID {holder.pid} " in line and "LESSONSYNC_DUCKDB_LOCK_TIMEOUT" in line for line in waits)


def test_the_default_lock_wait_outlasts_a_readers_query() -> None:
    assert Settings().duckdb_lock_timeout >= 300 and connection.LOCK_REPORT_EVERY_SECONDS == 30
