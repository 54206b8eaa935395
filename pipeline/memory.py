"""The allocators of a sync run's process, set once when the raw sync starts (pipeline/raw/runner.py enters
`sync_process_memory` in the run's own process, before its fetch threads start).

glibc gives every allocating thread an arena of its own and raises its mmap threshold after the first large free,
so later page-sized buffers stay in its heaps: `M_ARENA_MAX` 2 and a fixed `M_MMAP_THRESHOLD` keep the free space
small and hand big buffers back to the OS. mallopt, unlike the `MALLOC_*` variables, works wherever the run
executes (daemon, code server, CLI) and binds only arenas created after it, hence before the threads start.
Arrow's pool stays the wheel's mimalloc (switching it at run time would split Arrow's memory over two allocators;
how mimalloc returns memory is set in `pipeline/__init__.py`), and pandas stays out of a sync process and its
decode workers (`keep_pandas_out`). Why, and what it saves: docs/warehouse.md, "The process around DuckDB".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib.abc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

M_MMAP_THRESHOLD = -3  # glibc malloc.h
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, kept fixed (no dynamic raise)
_tuned: bool | None = None
_collections_paused = False  # by pause_collections, until resume_collections
_frozen_for_the_process = False  # resume_collections froze the heap for the rest of this one-shot process


@contextmanager
def sync_process_memory() -> Iterator[None]:
    """Within the block: glibc tuned and pandas kept out (once per process, for good), and the objects that exist
    when it starts (imports, definitions, the orchestrator: a million) left out of the garbage collections, which
    would each walk them with the GIL held, stalling the client's event loop. Back at the end, so a process that
    syncs again still collects what this sync left; a one-shot command frozen by `resume_collections` stays so."""
    tune_process_memory()
    keep_pandas_out()
    gc.freeze()
    try:
        yield
    finally:
        if not _frozen_for_the_process:
            gc.unfreeze()


def pause_collections() -> None:
    """No garbage collection until `resume_collections`, for a one-shot command (`lessonsync sync`) while it imports
    Dagster and builds its definitions: about a million objects that live as long as the process, which each full
    collection meanwhile would walk again (five of them, with the GIL held while the fetches started ahead wait)."""
    global _collections_paused
    if gc.isenabled():
        gc.disable()
        _collections_paused = True


def resume_collections() -> None:
    """After `pause_collections`: what exists now is frozen out of every later collection for the rest of the
    process (which ends with its command; `sync_process_memory` then leaves it frozen), and collection resumes.
    Nothing without a pause: a long-lived process (a test session, a code server) keeps collecting all it holds."""
    global _collections_paused, _frozen_for_the_process
    if _collections_paused:
        gc.freeze()
        gc.enable()
        _collections_paused, _frozen_for_the_process = False, True


def tune_process_memory() -> bool:
    """Sets glibc's arena count and mmap threshold, once per process; False where this is not glibc."""
    global _tuned
    if _tuned is None:
        glibc = _mallopt()
        _tuned = (
            glibc is not None and glibc(M_ARENA_MAX, ARENA_MAX) == 1 and glibc(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        )
    return _tuned


def _mallopt() -> Callable[[int, int], int] | None:
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): their defaults stay
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


class _PandasHiddenFromThisThread(importlib.abc.MetaPathFinder):
    """pandas is not importable for one thread, for the moment `keep_pandas_out` asks pyarrow its question."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if threading.get_ident() == self.thread and (name == "pandas" or name.startswith("pandas.")):
            raise ModuleNotFoundError("pandas is hidden while pyarrow asks for it (pipeline/memory.py)", name=name)
        return None


def keep_pandas_out() -> None:
    """pyarrow told, once per process, that pandas is absent; nothing if pandas is loaded.

    pyarrow's first conversion of a Python list (`pa.array`) asks whether pandas is importable, to tell whether the
    list is a pandas object, and imports it to find out: over a second of CPU and tens of MiB, on whichever thread
    converts first (in a sync, the client's event loop, stalling every request in flight), for nothing a sync or a
    decode worker uses. pyarrow asks once per process: told "no", it converts lists without asking again. What
    does need pandas still gets it: pyarrow imports it on demand for a pandas call (`to_pandas()`,
    `from_pandas()`), and an `import pandas` works as always."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    hidden = _PandasHiddenFromThisThread()
    sys.meta_path.insert(0, hidden)
    try:
        pa.array([None])  # any list: pyarrow's one look for pandas, answered by the ImportError it expects
    finally:
        sys.meta_path.remove(hidden)
