"""SIGTERM ends a command within its grace whatever it waits on: here a main thread that never returns to Python
(a handler that only records the signal, as Dagster's does between steps, and a wait nothing interrupts)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

SCRIPT = """
import signal, sys, threading
from pipeline.cli.stopping import stop_promptly_on_signals
with stop_promptly_on_signals("sync", grace=1.0):
    signal.signal(signal.SIGTERM, lambda *_: None)  # the signal is recorded, nothing is raised
    print("waiting", flush=True)
    threading.Event().wait()
"""


def test_sigterm_ends_a_stuck_command_within_its_grace() -> None:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "waiting"
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=30)[0]
    assert time.monotonic() - signalled < 5.0
    assert process.returncode == 143
    assert output.strip().startswith("sync FAILED: stopped by SIGTERM")
