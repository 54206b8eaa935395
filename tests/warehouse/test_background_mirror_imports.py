"""The background Iceberg mirror's first table opens the catalog (pyiceberg's SqlCatalog), which imports SQLAlchemy's
ORM. While `sqlalchemy.orm` imports, an inspection hook it registers for every object is live before the
`sqlalchemy.orm.exc` it names is complete: a statement another thread builds then, with a value SQLAlchemy has no
type for (Dagster's event log binds an enum), fails with "partially initialized module 'sqlalchemy.orm.exc'". The
raw step's thread writes such events all along, so starting the worker imports the ORM on the starting thread first.
Run in a fresh interpreter (this process has long imported the ORM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import enum, json, sys
from pathlib import Path
import sqlalchemy
from warehouse_helpers import ALL_SPECS, GROUPS, load_once, make_warehouse
from pipeline.raw.mirror import MirrorWorker, await_background_mirror
from pipeline.warehouse.lake.iceberg import IcebergLocation, IcebergMirror

root = Path(sys.argv[1])
where = IcebergLocation.for_lake(root / "lake", f"sqlite:///{root / 'catalog.sqlite3'}")
wh = make_warehouse(root, table_mirror=IcebergMirror(where))
wh.ensure_tables(ALL_SPECS)
load_once(wh, "groups", [(GROUPS, [{"id": "g1", "title": "G", "disabled": False}])])
imported_before = "sqlalchemy.orm" in sys.modules


class Kind(str, enum.Enum):
    A = "a"


with wh.connect() as conn:
    worker = MirrorWorker.start(wh, conn)
worker.committed(["groups"])
worker.finish()
errors = []
while worker._thread.is_alive() and not errors:  # this thread's statements, as the raw step's event writes
    try:
        sqlalchemy.literal(Kind.A)
    except Exception as error:
        errors.append(f"{type(error).__name__}: {error}")
report = await_background_mirror(wh.path, collect=True)
print(json.dumps({"imported_before": imported_before, "errors": errors, "written": report.written, "failed": report.failed}))
"""


def test_statements_on_the_raw_steps_thread_never_meet_the_orm_half_imported_by_the_mirror(tmp_path: Path) -> None:
    here = Path(__file__).resolve().parent  # warehouse_helpers, and the checkout for `pipeline`
    env_path = os.pathsep.join([str(here), str(here.parent.parent)])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": env_path},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert not outcome["imported_before"], "the ORM was imported before the worker started: nothing is tested"
    assert outcome["errors"] == []
    assert "lms.groups" in outcome["written"] and outcome["failed"] == {}  # the mirror itself still works
