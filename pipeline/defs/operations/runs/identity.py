"""Which process executes a run, recorded as run tags, so a later run can tell a dead run from a live one."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

HOST_TAG = "lessonsync/host"
PID_TAG = "lessonsync/pid"
# The process's start time tells a dead run's pid from the same number reused by a later process.
PID_STARTED_TAG = "lessonsync/pid-started"
# Which run the three tags above were recorded for: Dagster copies a run's tags to its retries and re-executions,
# and a copy names the parent's (dead) process, not the child's.
PID_RUN_TAG = "lessonsync/pid-run"


@dataclass(frozen=True)
class RunProcess:
    host: str
    pid: int
    started: float  # seconds since the epoch, as psutil reports the process's creation

    def tags(self, run_id: str) -> dict[str, str]:
        return {
            HOST_TAG: self.host,
            PID_TAG: str(self.pid),
            PID_STARTED_TAG: f"{self.started:.2f}",
            PID_RUN_TAG: run_id,
        }

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
    if tags.get(PID_RUN_TAG) != run_id:
        return None
    try:
        return RunProcess(tags[HOST_TAG], int(tags[PID_TAG]), float(tags[PID_STARTED_TAG]))
    except (KeyError, ValueError):
        return None
