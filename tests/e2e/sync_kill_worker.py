"""Subprocess of test_recovery.py: `lessonsync sync <args>` that SIGKILLs itself when the warehouse commit
reaches <point> (pipeline/warehouse/hooks.py; "none": never, the parent kills it from outside)."""

from __future__ import annotations

import os
import signal
import sys

from pipeline import cli
from pipeline.warehouse import hooks


def main(point: str, sync_args: list[str]) -> int:
    hooks.on_point(lambda reached: os.kill(os.getpid(), signal.SIGKILL) if reached == point else None)
    return cli.main(["sync", *sync_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
