"""A sync run's process gets the settings of pipeline/memory.py from the raw sync's runner: glibc's mmap threshold
fixed (large buffers go back to the OS when freed), and pyarrow told that pandas is absent (its first list
conversion does not import it; `to_pandas()` still works), and the objects from before the run frozen out of its
garbage collections until it ends. Each run in a fresh interpreter, since the settings are process-wide. Never
timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

# Within the block the raw sync's runner enters (pipeline/raw/runner.py), after Dagster and LessonSync's definitions
# are imported as in a run: how many 1 MiB buffers glibc served by mmap after a 4 MiB free (which raises glibc's
# default threshold to 4 MiB: then none of them is).
_RUN = textwrap.dedent("""
    import ctypes, json
    from pipeline.defs.code_location import build_definitions
    from pipeline.memory import sync_process_memory
    from pipeline.settings import Settings

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    def mmapped_blocks_after_a_large_free():
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.mallinfo2.restype = Mallinfo2
        libc.free(libc.malloc(4 << 20))
        before = libc.mallinfo2().hblks
        blocks = [libc.malloc(1 << 20) for _ in range(50)]
        mmapped = libc.mallinfo2().hblks - before
        for block in blocks:
            libc.free(block)
        return mmapped

    def pandas_after_a_list_conversion():
        import sys
        import pyarrow as pa
        pa.array(["a list", "of strings"])
        return "pandas" in sys.modules

    def probe():
        import pyarrow as pa
        pandas_loaded = pandas_after_a_list_conversion()
        frame = pa.table({"x": [1, 2]}).to_pandas()
        import gc
        return {"mmapped": mmapped_blocks_after_a_large_free(), "pandas_after_conversion": pandas_loaded,
                "to_pandas_rows": len(frame), "frozen_in_run": gc.get_freeze_count()}

    build_definitions(Settings())
    with sync_process_memory():
        seen = probe()
    import gc
    print(json.dumps({**seen, "frozen_after_run": gc.get_freeze_count()}))
""")


def test_a_run_gets_a_fixed_mmap_threshold_pyarrow_without_pandas_and_a_frozen_heap() -> None:
    done = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["mmapped"] == 50  # glibc's default would have served them from the heap after the 4 MiB free
    assert seen["pandas_after_conversion"] is False  # ~1.4 s and ~33 MiB not spent on the client's event loop
    assert seen["to_pandas_rows"] == 2  # pyarrow imports pandas on demand for what needs it
    assert seen["frozen_in_run"] > 100_000  # Dagster and the imports: no full collection of the run walks them
    assert seen["frozen_after_run"] == 0  # collectable again once the run is over


def test_without_the_tuning_glibc_keeps_large_buffers_in_its_heap() -> None:
    """The probe above can tell: in a plain process the same buffers come from the heap."""
    probe = _RUN.split("def probe():")[0] + "print(mmapped_blocks_after_a_large_free())\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.strip().splitlines()[-1]) == 0


def test_without_keeping_it_out_pyarrow_imports_pandas_at_its_first_list_conversion() -> None:
    """The pandas probe above can tell: in a plain process the conversion imports pandas."""
    probe = "import sys, pyarrow as pa\npa.array(['a list', 'of strings'])\nprint('pandas' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_importing_lessonsync_sets_how_arrows_allocator_returns_memory_unless_the_deployment_did() -> None:
    """pipeline/__init__.py sets mimalloc's options before pyarrow loads (lazily committed arenas, purges every
    100 ms); a value already in the environment wins."""
    probe = (
        "import os, sys, pipeline\nassert 'pyarrow' not in sys.modules\n"
        "print(os.environ['MIMALLOC_ARENA_EAGER_COMMIT'], os.environ['MIMALLOC_PURGE_DELAY'])\n"
    )
    plain = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    for env, expected in ((plain, "0 100"), ({**plain, "MIMALLOC_PURGE_DELAY": "5"}, "0 5")):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == expected


def test_a_command_that_paused_collections_keeps_its_heap_frozen_through_the_run() -> None:
    """`lessonsync sync` pauses collections while it imports and builds its definitions, then freezes them for the
    rest of the process: the run's own freeze is not undone at its end (it would send every object back to the
    collections the process has left)."""
    script = textwrap.dedent("""
        import gc, json
        from pipeline.memory import pause_collections, resume_collections, sync_process_memory
        pause_collections()
        paused = not gc.isenabled()
        from pipeline.defs.code_location import build_definitions
        from pipeline.settings import Settings
        build_definitions(Settings())
        resume_collections()
        resumed, frozen = gc.isenabled(), gc.get_freeze_count()
        with sync_process_memory():
            pass
        print(json.dumps({"paused": paused, "resumed": resumed, "frozen": frozen, "after": gc.get_freeze_count()}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["paused"] and seen["resumed"], seen
    assert seen["frozen"] > 100_000, seen
    assert seen["after"] >= seen["frozen"], seen
