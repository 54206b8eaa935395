"""Handing freed memory back to the OS while streams run, so the client's resident memory stays flat.

Pages of answers are megabytes, received, decoded and freed thousands of times, interleaved with small
long-lived allocations; glibc's malloc keeps the freed space of its arenas mapped (it only returns the
top of a heap by itself), so the resident set drifts up with the length of a run (measured: ~50 MiB of
free-but-resident arena space after 1M active lessons, more during the answers of scale large).
`malloc_trim(0)` releases the free pages anywhere in every arena (glibc >= 2.8, madvise), and Arrow's
pool is asked to do the same. Called every RELEASE_EVERY_PAGES pages and at the end of every run; it
costs a few milliseconds (a fraction of a percent of the decoding work it follows). Elsewhere than
glibc (musl, macOS) only Arrow's pool is asked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import pyarrow as pa

RELEASE_EVERY_PAGES = 32


def _glibc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_trim = _glibc_trim()


def release_free_memory() -> None:
    """Returns free heap pages to the OS (glibc arenas and Arrow's default pool)."""
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim(0)
