"""Which process executes a run, recorded as run tags, so a later run can tell a dead run from a live one."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

# One tag, `host:pid:started:run`: the host and pid of the process executing the run, when that process started
# (whole seconds since the epoch: it tells a dead run's pid from the same number reused by a later process), and the
# first 8 characters of the run id it was recorded for (Dagster copies a run's tags to its retries and
# re-executions, and a copy names the parent's dead process, not the child's).
PROCESS_TAG = "lessonsync/process"
RUN_ID_CHARS = 8
# Runs recorded before PROCESS_TAG carry these four; they are still read.
HOST_TAG = "lessonsync/host"
PID_TAG = "lessonsync/pid"
PID_STARTED_TAG = "lessonsync/pid-started"
PID_RUN_TAG = "lessonsync/pid-run"


@dataclass(frozen=True)
class RunProcess:
    host: str
    pid: int
    started: float  # seconds since the epoch, as psutil reports the process's creation

    def tags(self, run_id: str) -> dict[str, str]:
        return {PROCESS_TAG: f"{self.host}:{self.pid}:{self.started:.0f}:{run_id[:RUN_ID_CHARS]}"}

    def is_alive(self) -> bool:
        """True while this very process runs (only answerable on its own host: callers check `host`)."""
        try:
            process = psutil.Process(self.pid)
            # A reused pid belongs to a process started later; a zombie is dead, its parent only has to reap it.
            return abs(process.create_time() - self.started) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False


def this_host() -> str:
    return socket.gethostname()


def current_process() -> RunProcess:
    return RunProcess(this_host(), os.getpid(), psutil.Process().create_time())


def recorded_process(run_id: str, tags: Mapping[str, str]) -> RunProcess | None:
    """The process run `run_id`'s tags name, or None for a run that never recorded one, recorded garbage, or
    carries tags copied from another run (a retry or re-execution before its own process tagged it)."""
    if PROCESS_TAG in tags:
        try:
            host, pid, started, recorded_for = tags[PROCESS_TAG].rsplit(":", 3)
            if recorded_for != run_id[:RUN_ID_CHARS]:
                return None
            return RunProcess(host, int(pid), float(started))
        except ValueError:
            return None
    if tags.get(PID_RUN_TAG) != run_id:
        return None
    try:
        return RunProcess(tags[HOST_TAG], int(tags[PID_TAG]), float(tags[PID_STARTED_TAG]))
    except (KeyError, ValueError):
        return None
