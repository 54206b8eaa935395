"""LessonSync: keeps a DuckDB warehouse and a Parquet lake in step with the learning platform (README.md)."""

import os

# DuckDB's allocator (the jemalloc its wheel links in) reads this once, when DuckDB loads, which is after this
# package's import wherever LessonSync runs (code location, run worker, CLI). With the background threads every
# connection enables (warehouse/duck/connection.py), memory a statement freed goes back to the OS within half a
# second, before the next commit runs beside the answers' fetch. A value set by the deployment wins.
os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", "dirty_decay_ms:500,muzzy_decay_ms:0")

# Arrow's allocator (the mimalloc pyarrow's wheel links in) reads these once, when pyarrow loads, also after this
# import; the decode workers (source/decode_workers.py) inherit them. By default mimalloc commits its arenas
# eagerly on Linux, and memory it purges there is only reset (MADV_FREE), which stays resident until the system
# runs short. Committed lazily, a purge decommits, and the memory leaves; a purge delay of 100 ms batches the
# purges so they cost no measurable CPU (figures: docs/BENCHMARKS.md). A value set by the deployment wins.
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "100")
