"""The background Iceberg mirror of a raw step that ended without ending it (the step failed outside its own code,
e.g. Dagster's storage on a full disk, and its generator was never closed, holding the mirror paused at a commit):
the next step that waits for it stops it instead of waiting for ever, and the mirror step brings up the rest."""

from __future__ import annotations

import threading

from warehouse_helpers import GROUPS, load_once

from pipeline.raw.mirror import MirrorWorker, await_background_mirror
from pipeline.warehouse import Warehouse


def group(gid: str) -> dict:
    return {"id": gid, "title": "G", "disabled": False}


def test_a_mirror_left_paused_by_a_step_that_never_ended_it_is_stopped_by_the_next_waiter(mirrored: Warehouse) -> None:
    load_once(mirrored, "groups", [(GROUPS, [group("g1"), group("g2")])])
    with mirrored.connect() as conn:
        worker = MirrorWorker.start(mirrored, conn)
    assert worker is not None
    worker.hold()  # a commit's pause the suspended raw step never released
    worker.committed(["groups"])  # queued behind the pause
    waited: list[object] = []
    waiter = threading.Thread(target=lambda: waited.append(await_background_mirror(mirrored.path)), daemon=True)
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "the next step waited for ever for a mirror its raw step never ended"
    report = waited[0]
    assert report is not None and report.written == [] and report.finished_at is not None
    assert worker.told_to_end


def test_a_mirror_its_raw_step_ended_is_waited_for_to_the_end(mirrored: Warehouse) -> None:
    load_once(mirrored, "groups", [(GROUPS, [group("g1")])])
    with mirrored.connect() as conn:
        worker = MirrorWorker.start(mirrored, conn)
    assert worker is not None
    worker.committed(["groups"])
    worker.finish()  # the raw step's normal end: what is queued, then a catch-up
    report = await_background_mirror(mirrored.path, collect=True)
    assert report is not None and not report.failed and report.checked >= 1
