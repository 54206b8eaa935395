"""The shipped workspace.yaml loads in a real dagster-webserver: every asset, check, schedule and sensor,
no load error, schedule and sensors on by default."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.contract.tables import TABLES

REPO = Path(__file__).resolve().parents[2]
QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name locationOrLoadError {
  __typename ... on PythonError { message }
  ... on RepositoryLocation { repositories { name
      assetNodes { assetKey { path } groupName description
                   assetChecksOrError { __typename ... on AssetChecks { checks { name } } } }
      schedules { name scheduleState { status } }
      sensors { name sensorState { status } } } } } } } } }"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def webserver(tmp_path_factory):
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").write_text((REPO / "pipeline" / "instance" / "dagster.yaml").read_text())
    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dagster-webserver")),
            "-w",
            "workspace.yaml",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        cwd=REPO,
        env={**os.environ, "DAGSTER_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("dagster-webserver did not start: " + (server.stderr.read() or "")[-3000:])
            time.sleep(0.5)
    yield port
    server.terminate()
    server.wait(timeout=30)


@pytest.mark.slow
def test_code_location_loads_with_every_asset_check_schedule_and_sensor(webserver):
    data = _graphql(webserver, QUERY)["data"]["workspaceOrError"]
    assert data["__typename"] == "Workspace", data
    (entry,) = data["locationEntries"]
    location = entry["locationOrLoadError"]
    assert location["__typename"] == "RepositoryLocation", location.get("message")
    (repository,) = location["repositories"]
    nodes = {"/".join(n["assetKey"]["path"]): n for n in repository["assetNodes"]}

    raw = {f"lms/{t}" for t, spec in TABLES.items() if spec.kind != "append"} | {
        "lms/certificates",
        "lms/certificate_events",
    }
    assert raw <= set(nodes)
    assert {n["groupName"] for k, n in nodes.items() if k in raw} == {
        "progress",
        "directory",
        "catalog",
        "sessions",
        "certificates",
    }
    assert any(k.startswith("analytics/") for k in nodes)
    assert all(n["description"] for n in nodes.values())
    checks = {name: {c["name"] for c in n["assetChecksOrError"].get("checks", [])} for name, n in nodes.items()}
    assert {"key_unique_not_null", "links_to_active_lessons", "not_shrinking"} <= checks["lms/answers"]
    assert "links_to_lesson_sessions" in checks["lms/lesson_session_registrations"]

    schedules = {s["name"]: s["scheduleState"]["status"] for s in repository["schedules"]}
    sensors = {s["name"]: s["sensorState"]["status"] for s in repository["sensors"]}
    assert schedules == {"nightly_sync_schedule": "RUNNING", "lake_maintenance_schedule": "RUNNING"}
    assert sensors.get("certificate_inbox_sensor") == "RUNNING"
