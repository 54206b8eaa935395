"""Good deliveries' latency while the webhook receiver is under attack, and the receiver's RSS.

For each attack, a receiver process (default limits, SQLite inbox) takes a steady stream of good deliveries
(`--good-senders` keep-alive senders, one delivery every `--interval` s each) while an attacker process,
on loopback, holds it for `--seconds`:

- huge_headers: connections streaming one endless header, reopened when the server closes them;
- many_headers: requests with 5,000 tiny headers, again and again;
- slowloris: connections sending a request head one line every second, never finishing it;
- idle: connections that open and send nothing, more of them than the connection cap;
- slow_body: authenticated requests whose body comes at 1 byte/s;
- content_length_lie: a Content-Length of 10,000 and 100 bytes sent.

Attack connections are reopened as the server closes them, so the count stays at the target. Reported per
attack: good deliveries' p50/p99/max latency, their failures, the attack connections closed by the server,
and the receiver's peak RSS.

    .venv/bin/python bench/receiver_attacks.py [--seconds 6] [--connections 1500]

Writes bench/results/receiver_attacks.json. tests/webhooks/test_receiver_attacks.py runs a small subset."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.webhook_bench import PATH, TOKEN, Sender, certificate_body, percentile  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ATTACKS = ("baseline", "huge_headers", "many_headers", "slowloris", "idle", "slow_body", "content_length_lie")
AUTH_HEAD = f"POST {PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"


def start_receiver(port: int, inbox: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "LESSONSYNC_WEBHOOK_BEARER_TOKENS": TOKEN,
        "LESSONSYNC_WEBHOOK_INBOX_PATH": str(inbox),
        **(extra_env or {}),
    }
    env.pop("LESSONSYNC_INBOX_URL", None)
    command = [sys.executable, "-m", "pipeline.cli", "receive", "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            import urllib.request

            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the receiver exited at startup") from None
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("receiver did not start in 60 s")


# ---- the attacker (its own process, so that its work does not slow the good senders' event loop) ----


async def _hold(port: int, connections: int, seconds: float, behave: Callable[..., Awaitable[None]]) -> int:
    """Keep `connections` attack connections open for `seconds`, each running `behave` and reopened when
    the server closes it. Returns how many times the server closed one."""
    stop = time.monotonic() + seconds
    closed = 0

    async def one() -> None:
        nonlocal closed
        while time.monotonic() < stop:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                await asyncio.wait_for(behave(reader, writer), timeout=max(0.01, stop - time.monotonic()))
            except (OSError, asyncio.IncompleteReadError, ConnectionError):
                pass
            except TimeoutError:
                pass
            finally:
                writer.close()
            if time.monotonic() < stop:
                closed += 1
                await asyncio.sleep(0.05)  # a reconnecting attacker, not a busy loop

    await asyncio.gather(*(one() for _ in range(connections)))
    return closed


async def _until_closed(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


async def huge_headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(AUTH_HEAD.encode() + b"X-Huge: ")
    chunk = b"a" * 16384
    while not reader.at_eof():
        writer.write(chunk)
        await writer.drain()


async def many_headers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    headers = "".join(f"X-{n}: v\r\n" for n in range(5000))
    writer.write((AUTH_HEAD + headers + "Content-Length: 2\r\n\r\n{}").encode())
    await _until_closed(reader)


async def slowloris(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"POST " + PATH.encode() + b" HTTP/1.1\r\n")
    for n in range(10_000):
        await asyncio.sleep(1.0)
        writer.write(b"X-Slow-%d: v\r\n" % n)
        await writer.drain()


async def idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _until_closed(reader)


async def slow_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(AUTH_HEAD.encode() + b"Content-Length: 1000\r\n\r\n")
    for _ in range(1000):
        writer.write(b" ")
        await writer.drain()
        await asyncio.sleep(1.0)


async def content_length_lie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(AUTH_HEAD.encode() + b"Content-Length: 10000\r\n\r\n" + b" " * 100)
    await _until_closed(reader)


BEHAVIOURS: dict[str, Callable[..., Awaitable[None]]] = {
    "huge_headers": huge_headers,
    "many_headers": many_headers,
    "slowloris": slowloris,
    "idle": idle,
    "slow_body": slow_body,
    "content_length_lie": content_length_lie,
}
# Connections per attack, as a share of --connections: the header floods need few to saturate a core.
SHARE = {"huge_headers": 0.02, "many_headers": 0.02, "slowloris": 1.0, "idle": 2.0, "slow_body": 0.2,
         "content_length_lie": 0.2}  # fmt: skip


def _attacker(port: int, attack: str, connections: int, seconds: float, result: multiprocessing.Queue) -> None:
    result.put(asyncio.run(_hold(port, connections, seconds, BEHAVIOURS[attack])))


# ---- the good senders and the measurement ----


async def good_traffic(port: int, senders: int, interval: float, seconds: float, first: int) -> dict[str, object]:
    latencies: list[float] = []
    failures: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def worker(index: int) -> None:
        sender: Sender | None = None
        number = first + index * 1_000_000
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                if sender is None:
                    sender = Sender(port)
                    await sender.open()
                status, _ = await asyncio.wait_for(sender.post(certificate_body(number)), timeout=30)
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, TimeoutError) as exc:
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
                sender = None
                continue
            latencies.append(time.perf_counter() - started)
            if status != 200:
                failures[str(status)] = failures.get(str(status), 0) + 1
            number += 1
            await asyncio.sleep(interval)
        if sender is not None:
            sender.writer.close()

    await asyncio.gather(*(worker(n) for n in range(senders)))
    latencies.sort()
    return {
        "good_deliveries": len(latencies),
        "good_failures": failures,
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
    }


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return


def run_attack(
    port: int, pid: int, attack: str, *, connections: int, seconds: float, good_senders: int, interval: float
) -> dict[str, object]:
    """One attack beside the good traffic; its figures."""
    sampler = RssSampler(pid)
    sampler.start()
    attacker = None
    context = multiprocessing.get_context("spawn")
    closed = context.Queue()
    count = max(1, int(connections * SHARE.get(attack, 0)))
    if attack != "baseline":
        attacker = context.Process(target=_attacker, args=(port, attack, count, seconds + 1.0, closed), daemon=True)
        attacker.start()
        time.sleep(1.0)  # the attack reaches its strength before the measurement starts
    first = (ATTACKS.index(attack) + 1) * 10**8
    figures = asyncio.run(good_traffic(port, good_senders, interval, seconds, first))
    server_closed = None
    if attacker is not None:
        attacker.join(timeout=seconds + 30)
        server_closed = closed.get(timeout=10) if not closed.empty() or attacker.exitcode == 0 else None
    sampler.stop.set()
    sampler.join()
    return {
        "attack": attack,
        "attack_connections": 0 if attacker is None else count,
        **figures,
        "attack_connections_closed_by_server": server_closed,
        "receiver_peak_rss_mib": round(sampler.peak / 2**20, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per attack")
    parser.add_argument("--connections", type=int, default=1500, help="slowloris connections (others scale)")
    parser.add_argument("--good-senders", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.02, help="pause between a sender's deliveries")
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = int(args.connections * max(SHARE.values())) + 512
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for attack in args.attacks.split(","):
            port = free_port()
            receiver = start_receiver(port, Path(tmp) / f"inbox-{attack}.sqlite3")
            try:
                result = run_attack(
                    port,
                    receiver.pid,
                    attack,
                    connections=args.connections,
                    seconds=args.seconds,
                    good_senders=args.good_senders,
                    interval=args.interval,
                )
            finally:
                receiver.terminate()
                receiver.wait(timeout=30)
            result["machine_load_1min"] = round(os.getloadavg()[0], 2)
            print(json.dumps(result), flush=True)
            results.append(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "receiver_attacks.json").write_text(json.dumps(results, indent=2))
    return 0


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
