"""The fetches of one Dagster run: one PlatformClient for every step of the run (so one transport, one limit of
LESSONSYNC_CONCURRENCY requests in flight across all streams), and the streams fetched ahead of their steps.

Lifetime: created by the run's first sync step; closed when the last user lets go (every prefetched stream
taken by its step and no step using the client), or by the run's executor when the run ends whatever happened
(pipeline/defs/operations/runs/executor.py: a failed run's untaken fetches are cancelled and their lake parts discarded)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.prefetch.background import BackgroundFetch
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient

_LOCK = threading.Lock()
_RUNS: dict[str, RunFetches] = {}
# Runs whose prefetch was started once: a step coming after the registry closed (every prefetched stream
# already committed) must not start it again. Run ids only, a few bytes each.
_STARTED: set[str] = set()


def prefetch_started(run_id: str) -> bool:
    """Whether a step of the run has started its background fetches."""
    with _LOCK:
        return run_id in _STARTED


class RunFetches:
    def __init__(self, run_id: str, settings: Settings) -> None:
        self.run_id = run_id
        self.client = PlatformClient(settings, page_cache=settings.page_cache_dir)
        self.client.open()
        self._fetches: dict[str, BackgroundFetch] = {}
        self._users = 0  # steps using the client now

    def should_prefetch(self) -> bool:
        """True once per run: for the first step, which starts the run's prefetches."""
        with _LOCK:
            if self.run_id in _STARTED:
                return False
            _STARTED.add(self.run_id)
            return True

    def add(self, fetch: BackgroundFetch) -> None:
        with _LOCK:
            self._fetches[fetch.stream] = fetch

    def take(self, stream: str) -> BackgroundFetch | None:
        """The prefetched fetch of `stream` (once), None when it was not prefetched."""
        with _LOCK:
            return self._fetches.pop(stream, None)

    def peek(self, stream: str) -> BackgroundFetch | None:
        """The prefetched fetch of `stream`, left for its step to take."""
        with _LOCK:
            return self._fetches.get(stream)

    def prefetched(self) -> list[str]:
        with _LOCK:
            return sorted(self._fetches)

    def _idle(self) -> bool:
        return self._users == 0 and not self._fetches

    def close(self) -> None:
        with _LOCK:
            fetches = list(self._fetches.values())
            self._fetches.clear()
        for fetch in fetches:
            fetch.cancel()
        self.client.close()


@contextmanager
def run_fetches(run_id: str, settings: Settings) -> Iterator[RunFetches]:
    """The run's fetches (created on first use), held for the duration of the block."""
    with _LOCK:
        run = _RUNS.get(run_id)
        if run is None:
            run = _RUNS[run_id] = RunFetches(run_id, settings)
        run._users += 1
    try:
        yield run
    finally:
        with _LOCK:
            run._users -= 1
            last = run._idle() and _RUNS.get(run_id) is run
            if last:
                del _RUNS[run_id]
        if last:
            run.close()


def add_prefetched(run_id: str, fetch: BackgroundFetch) -> None:
    """A fetch a step of the run started for a later step (the answers, from the active-lessons step): taken
    by that step like the others, or cancelled when the run ends. Called by a step that holds the run's
    fetches (run_fetches), so the run is registered."""
    with _LOCK:
        run = _RUNS.get(run_id)
    if run is None:
        fetch.cancel()
        raise RuntimeError(f"run {run_id}: no fetches registered; start {fetch.stream} from a step holding them")
    run.add(fetch)


def peek_prefetched(run_id: str, stream: str) -> BackgroundFetch | None:
    """The prefetched fetch of `stream`, left for its step to take (None when there is none)."""
    with _LOCK:
        run = _RUNS.get(run_id)
    return None if run is None else run.peek(stream)


def fetch_running(run_id: str, stream: str | None) -> bool:
    """Whether the run fetches `stream` in the background now: its step, if it ran now, would wait for it."""
    fetch = None if stream is None else peek_prefetched(run_id, stream)
    return fetch is not None and not fetch.ended


def take_prefetched(run_id: str, stream: str) -> BackgroundFetch | None:
    with _LOCK:
        run = _RUNS.get(run_id)
    return None if run is None else run.take(stream)


def close_run(run_id: str) -> list[str]:
    """At the end of a run: cancel what no step took (a failed or stopped run) and close the client; returns the
    streams cancelled."""
    with _LOCK:
        run = _RUNS.pop(run_id, None)
        _STARTED.discard(run_id)
    if run is None:
        return []
    cancelled = run.prefetched()
    run.close()
    return cancelled
