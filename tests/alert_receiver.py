"""A tiny local HTTP receiver for failure alerts, and the failure sensor evaluated on a real failed run (imported by name: tests/ is on sys.path)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dagster import DagsterEventType, DagsterInstance, build_run_status_sensor_context

from pipeline.defs.operations.alerts import build_failure_alert_sensor
from pipeline.settings import load_settings
from pipeline.stack import environment


@dataclass
class Receiver:
    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


@contextmanager
def alert_receiver(status: int = 200) -> Iterator[Receiver]:
    """Serve on a free loopback port; every POST body is kept (parsed and raw) and answered `status`."""
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            box[0].raw.append(body)
            box[0].bodies.append(json.loads(body))
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    box.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}/hooks/secret-token-in-path"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def evaluate_failure_sensor(instance: DagsterInstance, run_id: str, env: dict[str, str]) -> object:
    """Run the failure sensor on the RUN_FAILURE event of `run_id`, the way the daemon would: built from the
    settings of `env`, as the code location the daemon loads is."""
    with environment(env):
        sensor = build_failure_alert_sensor(load_settings())
    run = instance.get_run_by_id(run_id)
    failure = instance.all_logs(run_id, of_type=DagsterEventType.RUN_FAILURE)[0].dagster_event
    context = build_run_status_sensor_context(
        sensor_name=sensor.name, dagster_event=failure, dagster_instance=instance, dagster_run=run
    ).for_run_failure()
    return sensor(context)
