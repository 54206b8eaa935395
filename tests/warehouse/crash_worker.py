"""Subprocess of test_crash.py: commits generation 2 of the answers into the warehouse under <root> and
SIGKILLs itself when the commit reaches <point> ("none": never). Prints "committing" when the parts are
in the lake and the DuckDB commit starts, so the parent can also kill it from outside at any moment. With
--early the load goes in while it is written (early_insert.py), in parts of 1,500 rows."""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from warehouse_helpers import ANSWER_RESULTS, ANSWERS, T0, answers_generation, make_warehouse, write_in_slices

from pipeline.warehouse import hooks
from pipeline.warehouse.loading.early_insert import EarlyFirstLoad
from pipeline.warehouse.warehouse import utc_now


def main(root: str, point: str, rows_count: int, early: bool = False) -> None:
    def listener(reached: str) -> None:
        if reached == "parts_written":
            print("committing", flush=True)
        if reached == point:
            os.kill(os.getpid(), signal.SIGKILL)

    hooks.on_point(listener)
    answers, results = answers_generation(2, rows_count)
    warehouse = make_warehouse(Path(root), clock=utc_now)
    if early:
        with warehouse.load("answers", "crash-run", T0, part_rows=1_500) as load, warehouse.one_connection() as conn:
            inserting = EarlyFirstLoad.begin(conn, load, (ANSWERS, ANSWER_RESULTS))
            write_in_slices(load, ANSWERS, answers, inserting)
            write_in_slices(load, ANSWER_RESULTS, results, inserting)
            load.commit(cursor=T0 + timedelta(hours=2), early=inserting)
    else:
        with warehouse.load("answers", "crash-run", T0) as load:
            load.write(ANSWERS, answers)
            load.write(ANSWER_RESULTS, results)
            load.commit(cursor=T0 + timedelta(hours=2))
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), early="--early" in sys.argv[4:])
