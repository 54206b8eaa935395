"""Two webhook receivers on one PostgreSQL inbox, as behind a load balancer: N deliveries from S senders,
a share of them sent to both receivers at once (the platform's redelivery racing its first try), one
receiver SIGKILLed part-way (its senders retry on the other, as a load balancer would), and the load running
into a DuckDB warehouse all along. Then: every acknowledged delivery is in the warehouse (0 lost), and every
certificate is there once (0 doubled).

    .venv/bin/python bench/receiver_replicas.py [--deliveries 2000] [--senders 64] [--duplicates 0.33]

Starts its own PostgreSQL (tests/remote/remote_servers.py: the machine's initdb/pg_ctl, fsync off).
Writes bench/results/receiver_replicas.json. tests/remote/test_postgres_inbox.py runs a smaller version."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "remote"))
from bench.webhook_bench import TOKEN, Sender, certificate_body, percentile  # noqa: E402
from pipeline.warehouse import Warehouse  # noqa: E402
from pipeline.webhooks.inbox_postgres import PostgresInbox  # noqa: E402
from pipeline.webhooks.load import load_certificate_events  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_receiver(port: int, inbox_url: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`lessonsync receive` on the PostgreSQL inbox, once /healthz answers."""
    env = {
        **os.environ,
        "LESSONSYNC_WEBHOOK_BEARER_TOKENS": TOKEN,
        "LESSONSYNC_INBOX_URL": inbox_url,
        **(extra_env or {}),
    }
    command = [sys.executable, "-m", "pipeline.cli", "receive", "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"receiver exited: {process.stderr.read().decode() if process.stderr else ''}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("receiver did not start in 60 s")


@dataclass
class Outcome:
    acknowledged: set[int] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    retried_after_kill: int = 0


class Route:
    """One sender's connection to one receiver; `None` once that receiver is gone."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sender: Sender | None = None

    async def post(self, body: bytes) -> int | None:
        """The status, or None when the receiver did not answer (killed, connection reset)."""
        try:
            if self.sender is None:
                self.sender = Sender(self.port)
                await self.sender.open()
            status, _ = await self.sender.post(body)
            return status
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
            self.sender = None
            return None


async def send_all(
    ports: tuple[int, int], plan: list[tuple[int, bool]], senders: int, kill: tuple[subprocess.Popen[bytes], int]
) -> Outcome:
    """Deliver `plan` ((number, to both?)) from `senders` workers; the victim is killed after that many acks."""
    victim, kill_after = kill
    outcome = Outcome()
    queue: asyncio.Queue[tuple[int, bool]] = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)
    dead: set[int] = set()

    async def deliver(routes: list[Route], number: int, to_both: bool, turn: int) -> None:
        body = certificate_body(number)
        started = time.perf_counter()
        live = [r for r in routes if r.port not in dead]
        targets = live if to_both else [live[turn % len(live)]]
        statuses = list(await asyncio.gather(*(route.post(body) for route in targets)))
        for attempt in range(100):  # the platform retries until a receiver acknowledges
            if 200 in statuses:
                break
            if victim.poll() is not None:
                dead.add(ports[1])
            live = [r for r in routes if r.port not in dead]
            statuses.append(await live[attempt % len(live)].post(body))
            outcome.retried_after_kill += 1
            await asyncio.sleep(0.02)
        outcome.latencies.append(time.perf_counter() - started)
        for status in statuses:
            key = str(status)
            outcome.statuses[key] = outcome.statuses.get(key, 0) + 1
        if 200 in statuses:
            outcome.acknowledged.add(number)
            if victim.poll() is None and len(outcome.acknowledged) >= kill_after:
                victim.kill()
                dead.add(ports[1])

    async def worker(index: int) -> None:
        routes = [Route(ports[0]), Route(ports[1])]
        turn = index
        while not queue.empty():
            number, to_both = queue.get_nowait()
            await deliver(routes, number, to_both, turn)
            turn += 1
        for route in routes:
            if route.sender is not None:
                route.sender.writer.close()

    await asyncio.gather(*(worker(n) for n in range(senders)))
    return outcome


class Loader(threading.Thread):
    """The certificate load, again and again while the receivers take deliveries, as the sensor would."""

    def __init__(self, warehouse: Warehouse, inbox: PostgresInbox) -> None:
        super().__init__(daemon=True)
        self.warehouse, self.inbox = warehouse, inbox
        self.stop = threading.Event()
        self.loads = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(0.05):
                load_certificate_events(self.warehouse, self.inbox, chunk_events=500)
                self.loads += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc


def run_two_replicas(
    inbox_url: str, workdir: Path, deliveries: int, senders: int, duplicates: float, kill_share: float = 0.5
) -> dict[str, object]:
    """The whole experiment; returns its figures (`lost`, `doubled` must be 0)."""
    plan = [(n, n % round(1 / duplicates) == 0 if duplicates else False) for n in range(deliveries)]
    ports = (free_port(), free_port())
    survivor = start_receiver(ports[0], inbox_url)
    victim = start_receiver(ports[1], inbox_url)
    inbox = PostgresInbox(inbox_url)
    warehouse = Warehouse(workdir / "warehouse.duckdb", workdir / "lake")
    loader = Loader(warehouse, inbox)
    loader.start()
    started = time.perf_counter()
    try:
        outcome = asyncio.run(send_all(ports, plan, senders, (victim, int(deliveries * kill_share))))
    finally:
        elapsed = time.perf_counter() - started
        loader.stop.set()
        loader.join(timeout=120)
        for process in (survivor, victim):
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=30)
    if loader.error is not None:
        raise loader.error
    final = load_certificate_events(warehouse, inbox)
    with warehouse.connect(read_only=True) as conn:
        certificate_ids = [row[0] for row in conn.execute("SELECT id FROM lms.certificates").fetchall()]
        events = conn.execute("SELECT count(*) FROM lms.certificate_events").fetchone()[0]
    stored = [event.certificate_id for event in inbox.read_events()]
    acknowledged_ids = {orjson.loads(certificate_body(n))["_id"] for n in outcome.acknowledged}
    in_warehouse = set(certificate_ids)
    latencies = sorted(outcome.latencies)
    return {
        "deliveries": deliveries,
        "senders": senders,
        "sent_to_both": sum(1 for _, both in plan if both),
        "seconds": round(elapsed, 2),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "statuses": outcome.statuses,
        "victim_killed": victim.returncode is not None and victim.returncode < 0,
        "retries": outcome.retried_after_kill,
        "acknowledged": len(acknowledged_ids),
        "inbox_rows": len(stored),
        "inbox_distinct": len(set(stored)),
        "redeliveries_counted": _redeliveries(inbox_url),
        "warehouse_certificates": len(in_warehouse),
        "warehouse_events": events,
        "loads_during_delivery": loader.loads,
        "final_load_events": final.events_loaded,
        "lost": len(acknowledged_ids - in_warehouse),
        "doubled": (len(certificate_ids) - len(in_warehouse)) + (events - len(in_warehouse)),
        "stored_not_acknowledged": len(set(stored) - acknowledged_ids),
        "machine_load_1min": round(os.getloadavg()[0], 2),
    }


def _redeliveries(inbox_url: str) -> int:
    import psycopg2

    conn = psycopg2.connect(inbox_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT coalesce(sum(redeliveries), 0) FROM lessonsync_inbox_events")
            return int(cursor.fetchone()[0])
    finally:
        conn.close()


def main() -> int:
    from remote_servers import postgres_server, why_postgres_cannot_run

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--duplicates", type=float, default=1 / 3, help="share sent to both receivers at once")
    args = parser.parse_args()
    reason = why_postgres_cannot_run()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    with postgres_server() as server, tempfile.TemporaryDirectory() as tmp:
        url = server.create_database("inbox_bench")
        result = run_two_replicas(url, Path(tmp), args.deliveries, args.senders, args.duplicates)
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "receiver_replicas.json").write_text(json.dumps(result, indent=2))
    ok = result["lost"] == 0 and result["doubled"] == 0 and result["inbox_rows"] == result["inbox_distinct"]
    print("OK: 0 lost, 0 doubled" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
