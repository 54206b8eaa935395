"""The source client: a typed, resilient, streaming client for the platform's read API. What it reads and
yields is declared in pipeline.contract (models, tables, streams); here is how.

    from pipeline.source import PlatformClient

Modules, in the order a page travels (docs/architecture.md, "Following one page"):

- client.py: PlatformClient (sync face, background event loop, bounded queue) and the record-stream runs
- answers.py: the answers plan (fewest requests) and run (drift checks by active-lesson listings)
- sweeps.py: exact sweeps under page drift (the proof), bounded worker pools
- fetching.py: SourceCore, the pages of one request: first-page probe, pager, decode, emit; memory release
- paging.py: requests (endpoint, params, updatedSince) and pagers (which page numbers, when to stop)
- transport.py: HTTP (httpx over aiohttp), retries, Date-header clock; auth.py: bearer tokens
- decoding.py: page body -> validated dicts -> Arrow batches, quarantine; fast_decoding.py: the msgspec path
- stats.py: what a run did (RunStats, new fields, progress logs); errors.py: what can go wrong

This module is the client's only entrance: code outside `pipeline.source` imports from here, never from its
modules (the import contract `source-facade` in pyproject.toml checks it).

Its names are loaded on first use (pipeline/facades.py): a decode worker process imports
`pipeline.source.decode_workers`, and with it this package, without the client's HTTP stack, settings and logging
it never uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.facades import lazy_names

if TYPE_CHECKING:
    from pipeline.source.client import PlatformClient, stop_all_fetches
    from pipeline.source.decoding import Batch
    from pipeline.source.errors import PlatformUnreachableError
    from pipeline.source.fetching import release_free_memory
    from pipeline.source.slots import BACKGROUND, REQUEST_PRIORITY, URGENT
    from pipeline.source.stats import RunStats, StreamProgress, listen_to_progress, paths_of, publish_progress
    from pipeline.source.transport import RetryingRequest, duration_text

# Each public name and the module that defines it.
_EXPORTS = {
    "PlatformClient": "client",
    "stop_all_fetches": "client",
    "Batch": "decoding",
    "PlatformUnreachableError": "errors",
    "release_free_memory": "fetching",
    "BACKGROUND": "slots",
    "REQUEST_PRIORITY": "slots",
    "URGENT": "slots",
    "RunStats": "stats",
    "StreamProgress": "stats",
    "listen_to_progress": "stats",
    "paths_of": "stats",
    "publish_progress": "stats",
    "RetryingRequest": "transport",
    "duration_text": "transport",
}

__all__ = [
    "BACKGROUND",
    "REQUEST_PRIORITY",
    "URGENT",
    "Batch",
    "PlatformClient",
    "PlatformUnreachableError",
    "RetryingRequest",
    "RunStats",
    "StreamProgress",
    "duration_text",
    "listen_to_progress",
    "paths_of",
    "publish_progress",
    "release_free_memory",
    "stop_all_fetches",
]


__getattr__ = lazy_names(__name__, _EXPORTS)
