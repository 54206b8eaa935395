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


# The signal before any of Dagster's blocks: while the fetches started ahead run and Dagster is imported.
BEFORE_DAGSTER = CHILD.replace("    signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGINT))\n", "")


def _run(
    name: str, ignored: tuple[signal.Signals, ...] = (signal.SIGINT,), child: str = CHILD
) -> subprocess.CompletedProcess[str]:
    def ignore() -> None:
        for number in ignored:
            signal.signal(number, signal.SIG_IGN)

    return subprocess.run(
        [sys.executable, "-c", child.format(name=name)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=ignore,
    )


def test_sigterm_interrupts_though_the_parent_ignores_sigint() -> None:
    done = _run("SIGTERM")
    assert (done.returncode, done.stdout.strip()) == (1, "interrupted by SIGTERM"), done.stdout + done.stderr


def test_sigint_stays_ignored_where_the_parent_ignores_it() -> None:
    done = _run("SIGINT")
    assert (done.returncode, done.stdout.strip()) == (0, "not interrupted"), done.stdout + done.stderr


def test_sigterm_interrupts_though_the_parent_ignores_it_too() -> None:
    """An ignored disposition is inherited across exec: a test runner's worker whose SIGTERM Dagster mapped to its
    ignored SIGINT started `lessonsync sync` with SIGTERM ignored, and the sync ran on to its end."""
    assert BEFORE_DAGSTER != CHILD
    done = _run("SIGTERM", ignored=(signal.SIGINT, signal.SIGTERM), child=BEFORE_DAGSTER)
    assert (done.returncode, done.stdout.strip()) == (1, "interrupted by SIGTERM"), done.stdout + done.stderr


SLOW_TO_END = """
import os, signal, sys, time
from pipeline.cli.stopping import stop_promptly_on_signals
with stop_promptly_on_signals("test", grace=1) as received:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(3)
    except KeyboardInterrupt:
        print("test FAILED: stopped by", received.wait(1.0))
        received.said(1)
        time.sleep(30)  # ending slowly: the grace runs out
"""


def test_a_command_that_said_how_it_stopped_exits_with_its_status_when_the_grace_runs_out() -> None:
    done = subprocess.run([sys.executable, "-c", SLOW_TO_END], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.strip().splitlines() == ["test FAILED: stopped by SIGTERM"], done.stdout
