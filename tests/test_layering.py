"""The layers hold at run time, not only in the import graph lint-imports checks (pyproject [tool.importlinter]):
importing the contract, the warehouse, the webhooks, the cursor rule or the docs generator loads neither the
HTTP client (pipeline.source) nor an HTTP library. A fresh interpreter, so nothing is loaded beforehand."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
from pathlib import Path
import {module}
print(" ".join(sorted(name for name in sys.modules if name.startswith(("pipeline.source", "httpx", "aiohttp")))))
"""


@pytest.mark.parametrize(
    "module",
    [
        "pipeline.contract.tables",
        "pipeline.contract.streams",
        "pipeline.warehouse",
        "pipeline.webhooks",
        "pipeline.raw.windows",
        "pipeline.docs",
    ],
)
def test_importing_does_not_load_the_client(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == [], f"importing {module} loaded {done.stdout.strip()}"


def test_the_client_is_what_loads_httpx() -> None:
    """The probe can see a loaded client: importing it shows up (so an empty answer above means something)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(module="pipeline.source.client")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert {"pipeline.source.client", "httpx", "aiohttp"} <= set(done.stdout.split())


def test_pipeline_uses_only_the_public_dagster_api() -> None:
    """No module of pipeline/ names a private Dagster module (`dagster._...`): those change in any minor release,
    and Dagster is pinned only below its next major."""
    root = Path(__file__).parents[1] / "pipeline"
    private = re.compile(r"\bdagster\._")
    found = [
        f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == [], "private Dagster modules named in pipeline/:\n" + "\n".join(found)


FACE_PROBE = """
import sys
import pipeline.webhooks as webhooks
for name in webhooks.__all__:
    assert getattr(webhooks, name).__module__.startswith("pipeline.webhooks."), name
"""


def test_every_name_of_the_webhooks_face_resolves() -> None:
    """Each name pipeline.webhooks exports (lazily, from its module) is there, and defined in the package."""
    subprocess.run([sys.executable, "-c", FACE_PROBE], capture_output=True, text=True, check=True, timeout=120)


def test_the_receiver_loads_no_warehouse() -> None:
    """What `lessonsync receive` takes from the webhooks' face loads neither DuckDB nor the warehouse: the face
    imports a name's module when it is first asked for, not every module of the package."""
    probe = (
        "import sys\nfrom pipeline.webhooks import create_app, load_webhook_settings, server_config\n"
        "print(' '.join(sorted(m for m in sys.modules if m in ('duckdb', 'pipeline.warehouse'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.split() == []
