"""Subprocess of test_remote_faults.py: `run_sync` of the raw tables (the environment names the simulator,
the data dir and the S3 lake), SIGKILLing itself the <count>th time the commit path reaches <point>."""

from __future__ import annotations

import os
import signal
import sys

from dagster import DagsterInstance

from pipeline.settings import load_settings
from pipeline.sync import run_sync
from pipeline.warehouse import hooks


def main(point: str, count: int) -> None:
    reached = 0

    def listener(name: str) -> None:
        nonlocal reached
        if name == point:
            reached += 1
            if reached == count:
                os.kill(os.getpid(), signal.SIGKILL)

    hooks.on_point(listener)
    report = run_sync(load_settings(), select=("key:lms/*",), instance=DagsterInstance.ephemeral())
    print("finished", report.success, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
