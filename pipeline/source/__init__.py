"""The source client: a typed, resilient, streaming client for the platform's read API. What it reads and
yields is declared in pipeline.contract (models, tables, streams); here is how.

    from pipeline.source.client import PlatformClient

Modules, in the order a page travels (docs/architecture.md, "Following one page"):

- client.py: PlatformClient (sync face, background event loop, bounded queue) and the record-stream runs
- answers.py: the answers plan (fewest requests) and run (drift checks by active-lesson listings)
- sweeps.py: exact sweeps under page drift (the proof), bounded worker pools
- fetching.py: SourceCore, the pages of one request: first-page probe, pager, decode, emit; memory release
- paging.py: requests (endpoint, params, updatedSince) and pagers (which page numbers, when to stop)
- transport.py: HTTP (httpx over aiohttp), retries, Date-header clock; auth.py: bearer tokens
- decoding.py: page body -> validated dicts -> Arrow batches, quarantine; fast_decoding.py: the msgspec path
- stats.py: what a run did (RunStats, new fields, progress logs); errors.py: what can go wrong
"""
