"""The allocators of a sync run's process, set once when the run starts (LessonSync's executor calls
`tune_process_memory` in the run's own process, before any step: under `dagster dev` or the daemon that is the
run worker the launcher started, for `lessonsync sync` the CLI's process).

Measured with bench/rss_timeline.py (docs/BENCHMARKS.md, "Where a sync's memory goes"): at a commit's peak
DuckDB's own allocator holds its memory_limit and the rest is the process: the imports, glibc's heap and what
the fetch left behind. Two of those shrink with settings alone:

- Arrow's default pool (mimalloc in the pyarrow wheels) keeps pages freed on other threads than the one that
  calls `release_unused` (the part writers' and the client's threads allocate the batches): ~35 MiB still
  resident at a medium full sync's commit. glibc's malloc (`system`), with the settings below, gives them back.
- glibc gives every thread that allocates an arena of its own (up to 8 per core) and raises its mmap threshold
  after the first large free, so later page-sized buffers land in the heaps and stay there.
  `M_ARENA_MAX` 2 and a fixed `M_MMAP_THRESHOLD` (which also fixes the trim threshold) keep the free space small
  and let big buffers go back to the OS when freed.

The `MALLOC_ARENA_MAX` / `MALLOC_MMAP_THRESHOLD_` environment variables would have to be set before the process
starts (the daemon's, the code server's, every launcher's environment); mallopt works wherever the run executes.
`mallopt(M_ARENA_MAX)` binds arenas created after it, so it is applied before the run's threads start.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass

import pyarrow as pa

M_MMAP_THRESHOLD = -3  # glibc malloc.h
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, kept fixed (no dynamic raise)
ARROW_POOL = "system"


@dataclass(frozen=True)
class ProcessMemory:
    """What tune_process_memory set: glibc's options (False off glibc) and Arrow's pool backend."""

    glibc_tuned: bool
    arrow_pool: str


_tuned: ProcessMemory | None = None


def tune_process_memory() -> ProcessMemory:
    """Sets glibc's arena count and mmap threshold and Arrow's default pool, once per process."""
    global _tuned
    if _tuned is None:
        glibc = _mallopt()
        tuned = glibc is not None and glibc(M_ARENA_MAX, ARENA_MAX) == 1 and glibc(M_MMAP_THRESHOLD,
                                                                                   MMAP_THRESHOLD) == 1
        if pa.default_memory_pool().backend_name != ARROW_POOL:
            pa.set_memory_pool(pa.system_memory_pool())
        _tuned = ProcessMemory(tuned, pa.default_memory_pool().backend_name)
    return _tuned


def _mallopt():  # type: ignore[no-untyped-def]
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their defaults stay
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt
