"""Load benchmark of the certificate webhook receiver: deliveries/s and p50/p99 latency with
64 concurrent senders on loopback, the receiver in its own process, then a check that every delivery
answered 2xx is in the inbox (none lost, none stored twice).

    .venv/bin/python bench/webhook_bench.py [--deliveries 20000] [--senders 64] [--duplicates 0.05]

Writes bench/results/webhooks.json. `receiver_cpu_us_per_delivery` (CPU time of the receiver process per
delivery) is the figure to compare on a shared machine, where throughput and latency depend on the load.

The senders speak HTTP/1.1 keep-alive over raw asyncio streams: a general-purpose client costs more CPU
per request than the receiver does, and on a 2-core machine it would measure itself."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson
import psutil

try:  # the senders' own overhead should not be what is measured
    from uvloop import run
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    from asyncio import run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.webhooks.inbox import Inbox  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOKEN = "bench-token-not-a-secret"
PATH = "/webhooks/certificates"


def certificate_body(number: int) -> bytes:
    """A realistic payload (about 450 bytes); even numbers are already expired, odd ones are current."""
    expires = "2020-01-01T00:00:00.000Z" if number % 2 == 0 else "2031-01-01T00:00:00.000Z"
    return orjson.dumps(
        {
            "_id": f"{number:024x}",
            "_userId": f"user-{number % 5000}",
            "_ownerId": "owner-bench",
            "_badgeId": f"badge-{number % 40}",
            "creationDate": "2026-01-02T03:04:05.678Z",
            "expires": expires,
            "disabled": False,
            "expiryReminderSent": number % 2 == 0,
            "_lessonActiveIds": [f"al-{number}-{k}" for k in range(3)],
            "ruleData": {
                "type": "lesson",
                "name": "Safety basics",
                "description": "Pass 3 lessons",
                "validityDurationDays": 365,
            },
            "createdAt": "2026-01-02T03:04:05.678Z",
            "updatedAt": "2026-01-02T03:04:05.678Z",
            "__v": 0,
        }
    )


class Sender:
    """One keep-alive connection posting bodies one at a time, like one platform delivery worker."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.head = (
            f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\nX-Webhook-Source: bench-platform\r\n"
        ).encode()

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def post(self, body: bytes) -> tuple[int, bytes]:
        self.writer.write(self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)


async def run_senders(port: int, bodies: list[bytes], senders: int) -> tuple[list[float], dict[int, int], set[int]]:
    """Latencies (s), count per status, and the inbox sequences acknowledged."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sequences: set[int] = set()

    async def worker() -> None:
        sender = Sender(port)
        await sender.open()
        while not queue.empty():
            body = queue.get_nowait()
            started = time.perf_counter()
            status, answer = await sender.post(body)
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                sequences.add(orjson.loads(answer)["sequence"])
        sender.writer.close()

    await asyncio.gather(*(worker() for _ in range(senders)))
    return latencies, statuses, sequences


def start_receiver(port: int, inbox: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LESSONSYNC_WEBHOOK_BEARER_TOKENS": TOKEN, "LESSONSYNC_WEBHOOK_INBOX_PATH": str(inbox)}
    command = [sys.executable, "-m", "pipeline.cli", "receive", "--port", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"receiver did not start: {process.stderr.read().decode() if process.stderr else ''}")


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def healthz(port: int) -> dict[str, int]:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=20_000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--duplicates", type=float, default=0.05, help="share of redeliveries of earlier bodies")
    parser.add_argument("--port", type=int, default=18_766)
    parser.add_argument("--warmup", type=int, default=1000, help="deliveries sent first and not measured")
    args = parser.parse_args()

    distinct = int(args.deliveries * (1 - args.duplicates))
    bodies = [certificate_body(n) for n in range(distinct)]
    bodies += [bodies[n * 7 % distinct] for n in range(args.deliveries - distinct)]
    with tempfile.TemporaryDirectory() as tmp:
        inbox = Inbox(Path(tmp) / "inbox.sqlite3")
        receiver = start_receiver(args.port, inbox.path)
        try:
            run(run_senders(args.port, [certificate_body(10**9 + n) for n in range(args.warmup)], args.senders))
            commits_before, cpu_before = healthz(args.port)["inbox_commits"], cpu_seconds(receiver.pid)
            started = time.perf_counter()
            latencies, statuses, sequences = run(run_senders(args.port, bodies, args.senders))
            elapsed = time.perf_counter() - started
            commits, cpu = healthz(args.port)["inbox_commits"] - commits_before, cpu_seconds(receiver.pid) - cpu_before
        finally:
            receiver.terminate()
            receiver.wait(timeout=30)
        in_inbox = {event.sequence for event in inbox.read_events(after_sequence=args.warmup)}
    latencies.sort()
    result = {
        "deliveries": len(latencies),
        "senders": args.senders,
        "seconds": round(elapsed, 2),
        "deliveries_per_s": round(len(latencies) / elapsed),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2),
        "statuses": statuses,
        "distinct_acknowledged": len(sequences),
        "events_in_inbox": len(in_inbox),
        "lost": len(sequences - in_inbox),
        "inbox_commits": commits,
        "deliveries_per_commit": round(len(latencies) / max(commits, 1), 1),
        "receiver_cpu_us_per_delivery": round(cpu / len(latencies) * 1e6),
        "machine_load_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "webhooks.json").write_text(json.dumps(result, indent=2))
    ok = statuses == {200: args.deliveries} and not result["lost"] and len(in_inbox) == distinct == len(sequences)
    print("OK: every acknowledged delivery is in the inbox, once" if ok else "FAILED: deliveries lost or stored twice")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
