"""`lessonsync sync` started with SIGINT ignored (a shell's background job, a test runner's worker) still stops on
SIGTERM after Dagster's interrupt-capturing blocks, which map SIGTERM to SIGINT's handler; SIGINT stays ignored."""

from __future__ import annotations

import signal
import subprocess
import sys

# After each block that captures interrupts Dagster sets SIGTERM's handler to SIGINT's (dagster/_utils/interrupts.py,
# setup_interrupt_handlers); the child does the same, so the test needs no private Dagster API.
CHILD = """
import os, signal, sys, time
from pipeline.cli.stopping import stop_promptly_on_signals
with stop_promptly_on_signals("test", grace=20) as received:
    signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGINT))
    try:
        os.kill(os.getpid(), signal.{name})
        time.sleep(3)
    except KeyboardInterrupt:
        print("interrupted by", received.wait(1.0))
        sys.exit(1)
print("not interrupted")
"""


def _run(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD.format(name=name)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


def test_sigterm_interrupts_though_the_parent_ignores_sigint() -> None:
    done = _run("SIGTERM")
    assert (done.returncode, done.stdout.strip()) == (1, "interrupted by SIGTERM"), done.stdout + done.stderr


def test_sigint_stays_ignored_where_the_parent_ignores_it() -> None:
    done = _run("SIGINT")
    assert (done.returncode, done.stdout.strip()) == (0, "not interrupted"), done.stdout + done.stderr
