"""Stopping `lessonsync sync` on SIGTERM (cron's `timeout`, a pod stop) or Ctrl-C within seconds, whatever it waits on.

Dagster turns the signal into an interrupt of the step running on the main thread, and marks the run failed. Two
things would delay that: background fetches waiting on a slow platform (the run's end waits for them), and a
statement the main thread runs in DuckDB (the interrupt is raised only when it returns). So a watcher thread,
woken by the signal through `signal.set_wakeup_fd` (Dagster replaces the handlers, not the wakeup fd), stops every
fetch of the process at once, and if the process is still alive STOP_GRACE_SECONDS later, prints the FAILED line
and exits (with the command's own status instead, when it has said its last line already and only its shutdown is
slow): an uncommitted DuckDB transaction is rolled back by DuckDB itself, and the run, tagged with this process, is
marked failed by the next run or `lessonsync recover` (pipeline/defs/operations/runs/recovery.py)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.logs import print_result

log = logging.getLogger("lessonsync.cli")

STOP_GRACE_SECONDS = 5.0
STOPPING: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
EXIT_STATUS = 143  # 128 + SIGTERM, as a shell reports a process that SIGTERM ended


class Received:
    """The stopping signal received within the block ("SIGTERM"), None when none came."""

    signal: str | None = None
    exit_status: int | None = None  # the status the stopped command returned, once it has said its last line

    def __init__(self) -> None:
        self._known = threading.Event()

    def record(self, name: str) -> None:
        self.signal = name
        self._known.set()

    def said(self, exit_status: int) -> int:
        """The command said how it ended and returns `exit_status`: a process still ending when the grace runs out
        exits with it, its last line said already."""
        self.exit_status = exit_status
        return exit_status

    def wait(self, timeout: float) -> str | None:
        """The signal, once the watcher has read it (the interrupt may reach the main thread first)."""
        self._known.wait(timeout)
        return self.signal


@contextmanager
def stop_promptly_on_signals(what: str, grace: float = STOP_GRACE_SECONDS) -> Iterator[Received]:
    """Within the block (main thread only), SIGTERM or SIGINT ends `what` within `grace` seconds."""
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    # A signal mask inherited from the parent would hold the stopping signals pending for the whole run
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPPING))
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    previous_term = signal.getsignal(signal.SIGTERM)
    # The wakeup fd is written only for signals Python handles. A SIGTERM ignored by the parent is handled too: an
    # ignored disposition is inherited across exec, so a parent that ignored it by accident (a test runner's worker
    # after Dagster mapped SIGTERM to its ignored SIGINT) would leave `timeout` and a pod stop without effect.
    if previous_term in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    previous_int = signal.getsignal(signal.SIGINT)
    stopping = dict(STOPPING)
    if previous_int == signal.SIG_IGN:
        # Ignored by the parent (a shell's background job, a test runner's worker): SIGINT stays ignored, but Dagster
        # maps SIGTERM to SIGINT's handler after each of its interrupt-capturing blocks, which would ignore SIGTERM.
        signal.signal(signal.SIGINT, _interrupt_unless_sigint)
        del stopping[signal.SIGINT]
    watcher = threading.Thread(
        target=_watch, args=(read_end, what, grace, received, stopping), name="lessonsync-stop", daemon=True
    )
    watcher.start()
    try:
        yield received
    finally:
        if received.signal is not None and received.exit_status is not None:
            _end_with(received.exit_status)
        signal.set_wakeup_fd(previous_fd)
        if previous_term in (signal.SIG_DFL, signal.SIG_IGN, None):
            signal.signal(signal.SIGTERM, previous_term if previous_term is not None else signal.SIG_DFL)
        if previous_int == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.close(write_end)  # the watcher reads the end of the pipe and returns
        watcher.join(1.0)


def _end_with(status: int) -> None:
    """A stopped command that has said its last line ends at once with its status. The interpreter's shutdown after
    a stop (threads joined, Dagster's objects released) can meet one more interrupt under load, and a process
    interrupted there exits by SIGINT instead of its status."""
    sys.stdout.flush()  # os._exit writes no buffer out
    sys.stderr.flush()
    os._exit(status)


def _interrupt_unless_sigint(number: int, frame: object) -> None:
    """SIGINT's handler where the parent ignores SIGINT: SIGINT is ignored, any other signal Dagster routes here
    (SIGTERM) interrupts like Python's default SIGINT handler."""
    if number != signal.SIGINT:
        raise KeyboardInterrupt


def _watch(read_end: int, what: str, grace: float, received: Received, stopping: dict[int, str]) -> None:
    try:
        while data := os.read(read_end, 64):
            names = [stopping[number] for number in data if number in stopping]
            if names:
                received.record(names[0])
                _stop(names[0], what, grace, received)
                return
    finally:
        os.close(read_end)


def _stop(name: str, what: str, grace: float, received: Received) -> None:
    from pipeline.source import stop_all_fetches

    stopped = stop_all_fetches()
    log.warning("%s received: stopping %s (%d fetch(es) stopped); exiting within %.0f s", name, what, stopped, grace)
    timer = threading.Timer(grace, _exit_now, args=(name, what, grace, received))
    timer.daemon = True
    timer.start()


def _exit_now(name: str, what: str, grace: float, received: Received) -> None:
    status = received.exit_status
    if status is None:
        print_result(
            f"{what} FAILED: stopped by {name}; it did not end within {grace:.0f} s, so the process exits now "
            "(nothing half committed: DuckDB rolls back an open transaction; the next run marks this one failed)",
            outcome="failed",
        )
        status = EXIT_STATUS
    _end_with(status)
