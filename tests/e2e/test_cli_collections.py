"""`lessonsync sync` imports Dagster and builds its definitions with the garbage collector paused, then freezes
what it built out of every later collection (pipeline/memory.py): without the pause the imports alone cost 3-5
full collections, each walking every object imported so far while the fetches started ahead wait on the GIL."""

import json
import os
import subprocess
import sys

from dagster import DagsterInstance

from pipeline.instance import SHIPPED_CONFIG
from pipeline.stack import local_stack

# The command as its console script runs it, with the full collections it went through counted and the size of
# the frozen heap taken as it ends.
_COUNTED_COMMAND = """
import atexit, gc, json, sys
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "stop" and info["generation"] == 2 else None)
atexit.register(lambda: print(json.dumps({"full_collections": len(full), "frozen": gc.get_freeze_count()})))
from pipeline.cli import main
sys.argv = ["lessonsync", "sync", "--select", "key:lms/categories"]
sys.exit(main())
"""


def test_the_sync_command_imports_and_builds_its_definitions_without_full_collections(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(SHIPPED_CONFIG.read_text())
    with local_stack(tmp_path / "data", scale="tiny") as stack, DagsterInstance.from_config(str(home)):
        done = subprocess.run(
            [sys.executable, "-c", _COUNTED_COMMAND],
            env={**os.environ, **stack.run_env(), "DAGSTER_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["frozen"] > 100_000, seen  # Dagster, the definitions and the run: never walked again
    assert seen["full_collections"] <= 1, seen  # without the pause: one per few hundred thousand objects imported
