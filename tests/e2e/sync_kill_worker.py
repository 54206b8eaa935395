"""Subprocess of test_recovery.py: `lessonsync sync <args>` that SIGKILLs itself when a warehouse commit
reaches <point> for the <n>th time, given as "point:n" (pipeline/warehouse/hooks.py; a point may hold a colon
itself, "parts_written:active_lessons:1"; "none": never, the parent kills it from outside). With HOLD_AT=<point> in
its environment, the thread that reaches that point is held there (up to HOLD_SECONDS) until the kill: what it
would do next (a fetch's end, say) is then never done before the kill."""

from __future__ import annotations

import os
import signal
import sys
import threading

from pipeline import cli
from pipeline.warehouse import hooks

HOLD_SECONDS = 30.0


def main(kill_at: str, sync_args: list[str]) -> int:
    point, _, nth = kill_at.rpartition(":") if kill_at.rpartition(":")[2].isdigit() else (kill_at, "", "")
    hold_at = os.environ.get("HOLD_AT")
    never = threading.Event()
    reached_count = 0

    def listener(reached: str) -> None:
        nonlocal reached_count
        reached_count += reached == point
        if reached == point and reached_count == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
        if reached == hold_at:
            never.wait(HOLD_SECONDS)

    hooks.on_point(listener)
    return cli.main(["sync", *sync_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
