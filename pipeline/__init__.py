"""LessonSync: keeps a DuckDB warehouse and a Parquet lake in step with the learning platform (README.md)."""

import os

# DuckDB's allocator (the jemalloc its wheel links in) reads this once, when DuckDB loads, which is after this
# package's import wherever LessonSync runs (code location, run worker, CLI). With the background threads every
# connection enables (warehouse/connection.py), memory a statement freed goes back to the OS within half a
# second instead of ten: a 1M-row sorted insert's 130 MiB otherwise stayed resident while the answers' fetch
# started beside the next commits (pipeline/memory.py). A value set by the deployment wins.
os.environ.setdefault("DUCKDB_JE_MALLOC_CONF", "dirty_decay_ms:500,muzzy_decay_ms:0")

# Arrow's allocator (the mimalloc pyarrow's wheel links in) reads these once, when pyarrow loads, also after this
# import; the decode workers (source/decode_workers.py) inherit them. By default mimalloc commits its arenas
# eagerly on Linux, and memory it purges there is only reset (MADV_FREE), which stays resident until the system
# runs short: the pages the fetch and the lake writers freed stayed in the sync's RSS. Committed lazily, a purge
# decommits, and the memory leaves. Scale large, full sync (bench.rss_timeline): main process kernel peak
# 551.3 / 551.5 -> 497.2 MiB, process tree 569.4 / 576.2 -> 542.4 MiB. A purge delay of 100 ms instead of 10
# batches the purges: without it a latency-bound medium sync spent ~0.8 CPU-s more (5 runs each); with it, no
# difference beyond the noise (docs/BENCHMARKS.md, "Session 21"). A value set by the deployment wins.
os.environ.setdefault("MIMALLOC_ARENA_EAGER_COMMIT", "0")
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "100")
