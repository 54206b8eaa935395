"""Large answer pages decoded in worker processes, so the event loop keeps LESSONSYNC_CONCURRENCY requests in flight.

Why: the client's one event loop thread sends every request and reads every response. Decoding a page of answers
(hundreds of KB to megabytes) is about half of all the loop's work per request, and it holds the GIL (msgspec
builds Python objects, Arrow converts them): a thread would not run it beside the loop, and a loop that decodes
every page cannot turn 8 requests in flight around at 40 ms each.

What: `LESSONSYNC_DECODE_PROCESSES` worker processes run the same `FastPages.page` on the body and send back
its Arrow batches (an Arrow IPC stream per table: buffers, read back without a copy or per-row work). Each is a fresh interpreter
(`python -m pipeline.source.decode_workers`, talking over a socket pair): not forked, since this process has
threads, and not multiprocessing's spawn either, which runs the parent's main script again in the child (a
script without an `if __name__ == "__main__"` guard would sync a second time). One thread per worker sends it
a page and waits for the answer with the GIL released; the loop only awaits that thread's result.

Which pages go to a worker, when workers start and stop, and what they hold: docs/design.md, "Decode workers".
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.contract.declarations import ANSWER_STREAMS
from pipeline.contract.streams import STREAMS
from pipeline.contract.tables import TABLES
from pipeline.memory import keep_pandas_out
from pipeline.source.decoding import Batch, Page, PageLocation
from pipeline.source.paging import Request

log = logging.getLogger("lessonsync.source")

OFFLOAD_BYTES = 64 * 1024
START_AT_RECORDS = 10_000
START_AT_RECORDS_PER_PAGE = 25  # ~5-15 answer rows a record: a page of 25 records is ~64 KB or more
WAITING_PER_PROCESS = 16
READY = "ready"  # what a worker sends once its imports are done

# What a worker sends back: records as served, valid records, and (table name, Arrow IPC stream of its batch) per
# table, own table first
Decoded = tuple[int, int, list[tuple[str, bytes]]]


class _Worker:
    """One worker process and the connection to it; used by one thread at a time."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])  # where `pipeline` is importable from, as here
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        with theirs:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipeline.source.decode_workers", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
            )
        self.connection = Connection(ours.detach())

    def decode(self, job: tuple[Any, ...]) -> Decoded | None:
        self.connection.send(job)
        decoded: Decoded | None = self.connection.recv()  # what the worker's loop sends back (serve)
        return decoded

    def close(self) -> None:
        try:
            self.connection.close()  # the worker reads end-of-file and exits
        finally:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class DecodeWorkers:
    """Worker processes decoding large answer pages (module docstring); `processes` 0: none, every page here."""

    def __init__(self, processes: int, min_bytes: int = OFFLOAD_BYTES) -> None:
        if processes < 0:
            raise ValueError(f"decode processes must be 0 or more, got {processes}")
        self.processes = processes
        self.min_bytes = min_bytes  # smaller bodies are decoded here
        self.pages = 0  # pages the workers decoded (statistics, tests)
        self._threads: ThreadPoolExecutor | None = None
        self._idle: list[_Worker] = []  # started and ready, not decoding now
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._ready: Future[None] | None = None
        self._waiting = 0
        self._failed = False
        self._held = False  # no worker starts (hold)
        self._asked = False  # a start was asked for while held: made when the hold is lifted

    def hold(self, held: bool = True) -> None:
        """While held, no worker starts and pages are decoded here (module docstring); lifting the hold makes
        the start asked for meanwhile. Call it on the client's event loop, where takes() and start() run."""
        self._held = held
        if not held and self._asked:
            self._asked = False
            self.start()

    def takes(self, request: Request, body: bytes) -> bool:
        """Whether this page goes to a worker (else decode it here); starts the workers at the first such page."""
        if self.processes == 0 or self._failed or request.stream.pager != "answers" or len(body) < self.min_bytes:
            return False
        ready = self.start()
        return (
            ready.done()
            and self._threads is not None
            and not self._failed
            and self._waiting < self.processes * WAITING_PER_PROCESS
        )

    def start(self) -> Future[None]:
        """Start the workers (once; they import for about a second); done when they can take pages (at once
        when there are none to start, or while held: the start is then made when the hold is lifted)."""
        if self._held:
            self._asked = True
        if self.processes == 0 or self._held:
            done: Future[None] = Future()
            done.set_result(None)
            return done
        if self._ready is None:
            self._threads = ThreadPoolExecutor(self.processes, thread_name_prefix="lessonsync-decode")
            self._ready = self._threads.submit(self._start_workers)
        return self._ready

    def _start_workers(self) -> None:
        """In a thread: start the workers and wait until each has imported what it decodes with."""
        try:
            for _ in range(self.processes):
                worker = _Worker()
                with self._lock:
                    self._workers.append(worker)
                if worker.connection.recv() != READY:
                    raise RuntimeError("a decode worker did not report ready")
                with self._lock:
                    self._idle.append(worker)
        except Exception as error:
            self._fail(error)

    def _decode(self, job: tuple[Any, ...]) -> Decoded | None:
        """In a thread: one page by an idle worker (there is one: at most `processes` threads call this)."""
        with self._lock:
            worker = self._idle.pop()
        try:
            decoded = worker.decode(job)
        except BaseException:
            worker.close()
            raise
        with self._lock:
            self._idle.append(worker)
        return decoded

    async def page(self, request: Request, body: bytes, where: PageLocation) -> Page | None:
        """The page decoded by a worker, or None: decode it here (the fast path declined it, or the worker failed)."""
        threads = self._threads
        if threads is None:  # released or closed since takes() said yes
            return None
        job = (request.stream.name, dict(request.path_values), body, where)
        self._waiting += 1
        try:
            decoded = await asyncio.get_running_loop().run_in_executor(threads, self._decode, job)
        except (OSError, EOFError, pickle.PickleError, IndexError) as error:  # a dead worker: decode here from now on
            self._fail(error)
            return None
        except RuntimeError:  # its threads were shut down in the meantime (released or closed): decode it here
            return None
        finally:
            self._waiting -= 1
        if decoded is None:
            return None
        self.pages += 1
        return page_from(decoded, where)

    def _fail(self, error: BaseException) -> None:
        if not self._failed:
            self._failed = True
            log.warning(
                "decoding answer pages in %d worker process(es) stopped (%s: %s); the client's own thread "
                "decodes them from now on",
                self.processes,
                type(error).__name__,
                error,
            )

    def process_ids(self) -> list[int]:
        """The workers started so far (running or not)."""
        with self._lock:
            return [worker.process.pid for worker in self._workers]

    def release(self) -> None:
        """Let the workers go once a fetch is over, so their memory is not held through the commit that follows:
        an idle worker reads end-of-file and exits (close() reaps it); the next large fetch starts new ones."""
        self._asked = False  # a fetch over: a hold lifted after it starts nothing
        threads = self._threads
        if threads is None:
            return
        self._threads = self._ready = None
        threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.connection.close()

    def close(self) -> None:
        """Stop the workers and wait for them to exit (after the page they may be decoding)."""
        if self._threads is not None:
            self._threads.shutdown(wait=True, cancel_futures=True)
            self._threads = None
        self._failed = True  # closed for good: pages are decoded here
        with self._lock:
            workers, self._idle = list(self._workers), []  # kept in _workers: process_ids() still names them
        for worker in workers:
            worker.close()


def page_from(decoded: Decoded, where: PageLocation) -> Page:
    """The Page a worker's batches make: what FastPages.page returns for an answer page (no key hashes)."""
    served, records, batches = decoded
    built = [
        Batch(TABLES[name], pa.ipc.open_stream(stream).read_next_batch(), where.endpoint, where.page)
        for name, stream in batches
    ]
    return Page(where, served, built, records, 0, None, built[0].records)


# In the worker process


def decode_in_worker(
    fast: dict[str, Any], stream: str, path_values: dict[str, str], body: bytes, where: PageLocation
) -> Decoded | None:
    """FastPages.page of the body, as plain batches by table name; None when the fast path declines it."""
    decoder = fast.get(stream)
    page = None if decoder is None else decoder.page(Request(STREAMS[stream], path_values), body, where, False)
    if page is None:
        return None
    return page.served, page.records, [(batch.table.name, ipc_stream(batch.records)) for batch in page.batches]


def ipc_stream(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream: read back without copying its buffers (pickling rebuilds every column)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def serve(connection: Connection) -> None:
    """The worker's loop: a page in, its batches (or None) out, until the client closes the connection."""
    keep_pandas_out()  # pyarrow would import it at the first conversion, for nothing a worker uses (pipeline/memory.py)
    from pipeline.source.fast_decoding import FastPages

    fast = {name: FastPages.for_stream(STREAMS[name]) for name in ANSWER_STREAMS}
    connection.send(READY)
    while True:
        try:
            stream, path_values, body, where = connection.recv()
            connection.send(decode_in_worker(fast, stream, path_values, body, where))
        except (EOFError, BrokenPipeError, ConnectionResetError):  # the client closed or died: nothing to answer
            return


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: the client stops (and closes the connection), not this process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(Connection(int(sys.argv[1])))
