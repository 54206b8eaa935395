"""What the runner says about the streams it waits for: a progress line only when a stream's page count moved since
its last one, and a stream that did not move says once what it waits for (the platform token every stream waits
on, a request of its own being retried, or its next page) and then nothing until that changes. A run stuck on the
token therefore logs one waiting line per stream, and the transport's one WARNING per retry (transport.py).

What a waiting stream waits for also goes to the progress listeners at every report (a live display:
pipeline/cli/progress.py shows the retry budget as it runs down), and so does a stream's end (committed, failed, stopped);
its pages and rows reach them from the client (pipeline/source/stats.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pipeline.source import RetryingRequest, StreamProgress, duration_text, publish_progress


class ProgressLog(Protocol):
    def info(self, msg: str, *args: object, extra: Mapping[str, object] | None = None) -> None: ...


class Watched(Protocol):
    """A stream's fetch as the runner sees it (pipeline/raw/fetch.py's BackgroundFetch)."""

    stream: str
    pages: int
    rows: int
    started: float

    def retrying(self) -> tuple[RetryingRequest, ...]: ...


@dataclass(frozen=True)
class Wait:
    kind: str  # what is waited for, without the figures that change while waiting (said once per kind)
    text: str


def waiting_for(stream: str, pages: int, retrying: tuple[RetryingRequest, ...]) -> Wait:
    """What a stream whose page count did not move is waiting for."""
    token = next((r for r in retrying if r.is_token), None)
    if token is not None:
        return Wait(f"token {token.method} {token.path}", f"the platform token ({_retrying(token)})")
    own = next((r for r in retrying if r.stream == stream), None)
    if own is not None:
        return Wait(f"retry {own.method} {own.path}", f"{own.method} {own.path} ({_retrying(own)})")
    return Wait("page", "its first page" if pages == 0 else "its next page")


def _retrying(request: RetryingRequest) -> str:
    return (
        f"{request.method} {request.path} retrying: attempt {request.attempt} failed, "
        f"{duration_text(request.budget_left())} of the retry budget left"
    )


@dataclass
class _Said:
    pages: int = 0
    wait: str | None = None


class ProgressReporter:
    """The runner's progress lines, one reporter per run."""

    def __init__(self, log: ProgressLog) -> None:
        self._log = log
        self._said: dict[str, _Said] = {}

    def report(self, fetch: Watched) -> None:
        seconds = max(time.monotonic() - fetch.started, 1e-9)
        said = self._said.setdefault(fetch.stream, _Said())
        fields = {
            "stream": fetch.stream,
            "pages": fetch.pages,
            "rows": fetch.rows,
            "rate": round(fetch.rows / seconds, 1),
        }
        if fetch.pages != said.pages:
            said.pages, said.wait = fetch.pages, None
            self._log.info(
                f"{fetch.stream}: {fetch.pages:,} pages, {fetch.rows:,} rows, {fetch.rows / seconds:,.0f} rows/s so far",
                extra={**fields, "event": "progress"},
            )
            return
        wait = waiting_for(fetch.stream, fetch.pages, fetch.retrying())
        publish_progress(StreamProgress(fetch.stream, "waiting", note=wait.text))  # the figures: the client's own
        if wait.kind != said.wait:
            said.wait = wait.kind
            self._log.info(f"{fetch.stream}: waiting for {wait.text}", extra={**fields, "event": "waiting"})

    def ended(self, fetch: Watched, state: str) -> None:
        """The stream is `state` (committed, failed, stopped): its line of a live display says so."""
        publish_progress(StreamProgress(fetch.stream, state))
