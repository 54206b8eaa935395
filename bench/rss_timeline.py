"""Where a sync's memory goes (the aim: peak RSS <= 600 MiB), not a test: the sync child of bench/sync_bench.py
samples itself every 0.2 s (its own VmRSS, the summed RSS of its whole process tree, Arrow's pool, glibc's heap in
use and free) and marks named points: Dagster's step starts and ends, and entry/exit of the functions in MARKED
(the fetch's end, the flush, the commit, the checks). The report says what was running, and what was resident,
at the peak.

    .venv/bin/python -m bench.rss_timeline --scale medium --work-dir /tmp/t [--kinds full,no_change,one_percent,full_refresh]

Results: bench/results/rss_<scale>_<kind>.json (samples and marks) and a text summary per run kind. The kernel's
peak (os.wait4 ru_maxrss) is reported beside the sampled one: a spike shorter than the interval is only in it.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TIMELINE_ENV = "LESSONSYNC_BENCH_TIMELINE"  # set by this module for the sync child: where it writes its timeline
INTERVAL_S = 0.2
# "module:qualname" of functions whose entry and exit are marked, wherever the object is referenced from.
MARKED = (
    "pipeline.raw.fetch:BackgroundFetch.wait",
    "pipeline.warehouse.loading.load:Load.flush",
    "pipeline.warehouse.loading.load:Load.commit",
    "pipeline.warehouse.loading.commit:commit_load",
    "pipeline.warehouse.merge.apply:apply_load",
    "pipeline.warehouse.merge.checks:duplicate_keys",
    "pipeline.warehouse.merge.checks:orphans",
    "pipeline.warehouse.merge.staging:create_stage",
    "pipeline.warehouse.merge.upsert:upsert_stage",
    "pipeline.warehouse.merge.staging:mark_stale_children",
    "pipeline.warehouse.merge.deletions:replace_children",
)


# ---------------------------------------------------------------- in the sync child


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Callable[[], tuple[int, int]] | None:
    """glibc's heap: (bytes in use, bytes free but kept), mmapped blocks counted as in use; None off glibc."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2

    def read() -> tuple[int, int]:
        info = fn()
        return info.uordblks + info.hblkhd, info.fordblks

    return read


def _duckdb_jemalloc() -> Callable[[], tuple[int, int]] | None:
    """DuckDB's own allocator (the jemalloc its wheel links in, symbols prefixed duckdb_je_): (bytes allocated,
    bytes resident); None where the wheel has no such symbol."""
    import duckdb

    try:
        mallctl = ctypes.CDLL(duckdb._duckdb.__file__).duckdb_je_mallctl  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return None
    size_p = ctypes.POINTER(ctypes.c_size_t)
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, size_p, ctypes.c_void_p, ctypes.c_size_t]

    def stat(name: bytes) -> int:
        value, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
        mallctl(name, ctypes.byref(value), ctypes.byref(size), None, 0)
        return value.value

    def read() -> tuple[int, int]:
        epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
        mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8)  # refresh the stats
        return stat(b"stats.allocated"), stat(b"stats.resident")

    return read


def _status_mib(pid: int | str, fields: tuple[str, ...]) -> list[float]:
    values = dict.fromkeys(fields, 0.0)
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name = line.split(":", 1)[0]
                if name in values:
                    values[name] = int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return list(values.values())


def rss_mib(pid: int | str = "self") -> float:
    """VmRSS of a process, MiB (0 when it is gone)."""
    return _status_mib(pid, ("VmRSS",))[0]


def descendants(pid: int | str = "self") -> list[int]:
    """The pids of a process's descendants, from the kernel's child list of each of its threads
    (/proc/<pid>/task/<tid>/children): a handful of small reads per sample. psutil's `children(recursive=True)`
    reads the stat file of every process on the machine, in Python, in the sync's own process: a cost the sampler
    must not add to the run it measures. psutil where the kernel keeps no such list (CONFIG_PROC_CHILDREN)."""
    if not _kernel_lists_children():
        import psutil

        root = psutil.Process() if pid == "self" else psutil.Process(int(pid))
        return [child.pid for child in root.children(recursive=True)]
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        for children in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                pids = [int(child) for child in children.read_text().split()]
            except (FileNotFoundError, ProcessLookupError):  # the thread or the process has ended
                continue
            found += pids
            pending += pids
    return found


@functools.cache
def _kernel_lists_children() -> bool:
    return any(Path("/proc/self/task").glob("*/children"))


def _tree_sum(measure: Callable[[int | str], float], tree: list[int] | None = None) -> float:
    """`measure` of this process plus every descendant's (`tree`: their pids, when already known)."""
    return measure("self") + sum(measure(pid) for pid in (descendants() if tree is None else tree))


def tree_rss_mib(tree: list[int] | None = None) -> float:
    """This process's RSS plus every descendant's: what the machine holds for the sync, a page two of them share
    counted twice."""
    return _tree_sum(rss_mib, tree)


def pss_mib(pid: int | str = "self") -> float:
    """Proportional set size of a process, MiB (0 when it is gone): its private pages plus its share of pages it
    shares (the decode workers map the same libraries as the sync process)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            return next((int(line.split()[1]) / 1024 for line in rollup if line.startswith("Pss:")), 0.0)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0


def tree_pss_mib(tree: list[int] | None = None) -> float:
    """The PSS of this process and every descendant, summed: the memory the machine holds for the sync, each
    shared page counted once (the RSS sum, `tree`, counts the libraries a worker shares with its parent twice)."""
    return _tree_sum(pss_mib, tree)


SAMPLE_FIELDS = (
    "rss",
    "tree",
    "anon",
    "file",
    "arrow",
    "glibc_used",
    "glibc_free",
    "duckdb_allocated",
    "duckdb_resident",
    "tree_pss",
)


class Timeline:
    """Samples and marks of this process, written as JSON to `path` when closed."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa

        self.path = path
        self.samples: list[list[float]] = []  # [t, *SAMPLE_FIELDS] (MiB)
        self.marks: list[list[Any]] = []  # [t, name, rss]
        self._pool = pa.default_memory_pool()
        self._glibc = _mallinfo2()
        self._duckdb = _duckdb_jemalloc()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-timeline", daemon=True)

    def sample(self) -> list[float]:
        used, free = self._glibc() if self._glibc else (0, 0)
        duck_allocated, duck_resident = self._duckdb() if self._duckdb else (0, 0)
        rss, anon, file = _status_mib("self", ("VmRSS", "RssAnon", "RssFile"))
        tree = descendants()
        mib = 1024 * 1024
        return [
            time.time(),
            *(
                round(value, 1)
                for value in (
                    rss,
                    tree_rss_mib(tree),
                    anon,
                    file,
                    self._pool.bytes_allocated() / mib,
                    used / mib,
                    free / mib,
                    duck_allocated / mib,
                    duck_resident / mib,
                    tree_pss_mib(tree),
                )
            ),
        ]

    def mark(self, name: str) -> None:
        self.marks.append([time.time(), name, round(rss_mib(), 1)])

    def _run(self) -> None:
        probe = _Probe.from_env()
        while not self._stop.wait(INTERVAL_S):
            self.samples.append(self.sample())
            if probe is not None:
                probe.maybe(self.samples[-1])

    def start(self) -> None:
        self.samples.append(self.sample())
        self._thread.start()

    def close(self, steps: list[list[Any]]) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(self.sample())
        self.path.write_text(json.dumps({"samples": self.samples, "marks": sorted(self.marks + steps)}))


PROBE_ENV = "LESSONSYNC_BENCH_PROBE"  # diagnosis only: a file to write tracemalloc/gc probes to


class _Probe:
    """Diagnosis, opt-in: every EVERY_S seconds, counts of gc-tracked objects by type (a few named ones
    always shown), what each PartWriter buffers and each asyncio.Queue holds (data and the root buffers it keeps
    alive), and unless LESSONSYNC_BENCH_PROBE_TRACE=0 a tracemalloc snapshot diffed against the previous one by
    traceback; written to the file PROBE_ENV names. It slows the sync: gc.get_objects() stops every thread for
    ~50 ms, and tracemalloc makes a medium full sync ~6x slower (use it for what accumulates, not for timings)."""

    EVERY_S = 2.0

    def __init__(self, path: str) -> None:
        import tracemalloc

        self.out = open(path, "w")  # noqa: SIM115 - written for the whole run, closed by close()
        self.frames = int(os.environ.get("LESSONSYNC_BENCH_PROBE_FRAMES", "12"))
        if os.environ.get("LESSONSYNC_BENCH_PROBE_TRACE", "1") == "1" and not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)
        self.last_t = 0.0
        self.previous = None
        self.t0 = time.time()

    @classmethod
    def from_env(cls) -> _Probe | None:
        path = os.environ.get(PROBE_ENV)
        return cls(path) if path else None

    def maybe(self, sample: list[float]) -> None:
        import gc
        import tracemalloc
        from collections import Counter

        now = time.time()
        if now - self.last_t < self.EVERY_S:
            return
        self.last_t = now
        write = self.out.write
        fields = dict(zip(SAMPLE_FIELDS, sample[1:], strict=False))
        write(
            f"\n===== t={now - self.t0:.1f} glibc_used={fields['glibc_used']} tree={fields['tree']} "
            f"arrow={fields['arrow']}\n"
        )
        counts = Counter(type(o).__qualname__ for o in gc.get_objects())
        write("gc top: " + ", ".join(f"{k}={v}" for k, v in counts.most_common(25)) + "\n")
        for name in (
            "RecordBatch",
            "Buffer",
            "Task",
            "Future",
            "Page",
            "Batch",
            "Request",
            "PlannedRequest",
            "Response",
            "Table",
            "ChunkedArray",
            "ClientResponse",
            "Timed",
            "RetryCallState",
            "AsyncRetrying",
            "Handle",
            "TimerHandle",
            "coroutine",
            "frame",
            "cell",
        ):
            write(f"  {name}={counts.get(name, 0)}")
        write("\n")
        _holders_of(write)
        if tracemalloc.is_tracing():
            snap = tracemalloc.take_snapshot()
            traced, peak = tracemalloc.get_traced_memory()
            write(f"tracemalloc traced={traced / 2**20:.1f} MiB peak={peak / 2**20:.1f} MiB\n")
            by_file = snap.statistics("lineno")[:15]
            for stat in by_file:
                write(f"  LINE {stat.size / 2**20:7.2f} MiB {stat.count:8d} {stat.traceback[0]}\n")
            if self.previous is not None:
                for stat in snap.compare_to(self.previous, "traceback")[:8]:
                    write(
                        f"  DIFF {stat.size_diff / 2**20:+7.2f} MiB (now {stat.size / 2**20:.2f}) "
                        f"count {stat.count_diff:+d} (now {stat.count})\n"
                    )
                    for line in stat.traceback.format(limit=self.frames, most_recent_first=True)[:24]:
                        write("      " + line + "\n")
            self.previous = snap
        self.out.flush()


def _roots(batches: list[Any]) -> tuple[int, int, int]:
    """(data bytes, bytes of the distinct root buffers they slice, roots) of some Arrow batches."""
    data, roots = 0, {}
    for batch in batches:
        data += batch.nbytes
        for column in batch.columns:
            stack = [column]
            while stack:
                array = stack.pop()
                for buf in array.buffers():
                    if buf is None:
                        continue
                    root = buf
                    while root.parent is not None:
                        root = root.parent
                    roots[(root.address, root.size)] = root.size
    return data, sum(roots.values()), len(roots)


def _holders_of(write: Callable[[str], Any]) -> None:
    import asyncio
    import gc

    from pipeline.warehouse.lake.lake import PartWriter

    for obj in gc.get_objects():
        if isinstance(obj, PartWriter):
            data, held, n = _roots(list(obj._buffer))
            write(
                f"  PartWriter {obj.directory.split('/')[0]}: {len(obj._buffer)} batches {obj._buffered} rows, "
                f"data {data / 2**20:.1f} MiB, roots {held / 2**20:.1f} MiB in {n} buffers, writing={obj._writing is not None}\n"
            )
        elif isinstance(obj, asyncio.Queue):
            items = [getattr(i, "records", None) for i in list(obj._queue)]
            data, held, n = _roots([i for i in items if i is not None])
            write(f"  Queue {obj.qsize()}/{obj.maxsize}: data {data / 2**20:.1f} MiB roots {held / 2**20:.1f} MiB\n")


def _marked(name: str, fn: Callable[..., Any], timeline: Timeline) -> Callable[..., Any]:
    if hasattr(fn, "__wrapped_for_timeline__"):
        return fn

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        timeline.mark(f"{name} >")
        try:
            return fn(*args, **kwargs)
        finally:
            timeline.mark(f"{name} <")

    wrapper.__wrapped_for_timeline__ = True  # type: ignore[attr-defined]
    return wrapper


def install_marks(timeline: Timeline, targets: tuple[str, ...] = MARKED) -> list[str]:
    """Wraps each target, replacing every module-level reference to it (`from x import f` copies included) and
    the class attribute of a method; returns the targets found."""
    import importlib

    importlib.import_module("pipeline.defs.code_location")  # every module of the sync imported: copies are found

    found = []
    for target in targets:
        module_name, qualname = target.split(":")
        owner: Any = importlib.import_module(module_name)
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, attr)
        wrapped = _marked(qualname, original, timeline)
        setattr(owner, attr, wrapped)
        for module in list(sys.modules.values()):
            for key, value in list(getattr(module, "__dict__", {}).items()):
                if value is original:
                    setattr(module, key, wrapped)
        found.append(target)
    return found


@contextmanager
def timeline_from_env() -> Iterator[Timeline | None]:
    """The child's timeline when the parent asked for one (TIMELINE_ENV), else nothing; the caller hands its
    Dagster step marks to close()."""
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        yield None
        return
    timeline = Timeline(Path(path))
    install_marks(timeline)
    timeline.start()
    yield timeline


def step_marks(instance: Any, run_id: str) -> list[list[Any]]:
    """[t, 'step <key> >' or '<', rss=None] for every step start and end in the run's event log."""
    from dagster import DagsterEventType

    kinds = {DagsterEventType.STEP_START: ">", DagsterEventType.STEP_SUCCESS: "<", DagsterEventType.STEP_FAILURE: "<"}
    marks = []
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is not None and event.event_type in kinds:
            marks.append([record.timestamp, f"step {event.step_key} {kinds[event.event_type]}", None])
    return marks


# ---------------------------------------------------------------- reading a timeline


def summarize(timeline: dict[str, Any]) -> dict[str, Any]:
    """The peak sample, what was open (step, marked call) at it, and each step's peak and RSS at its start/end."""
    samples, marks = timeline["samples"], timeline["marks"]
    t0 = samples[0][0]
    peak = max(samples, key=lambda s: s[2])
    open_at_peak = _open_at(marks, peak[0])
    steps: dict[str, dict[str, float]] = {}
    for t, name, _ in marks:
        if name.startswith("step "):
            key, edge = name[5:-2], name[-1]
            steps.setdefault(key, {})["start" if edge == ">" else "end"] = t
    per_step = {}
    for key, span in steps.items():
        inside = [s for s in samples if span.get("start", t0) <= s[0] <= span.get("end", samples[-1][0])]
        if inside:
            top = max(inside, key=lambda s: s[2])
            per_step[key] = {
                "start_s": round(span.get("start", t0) - t0, 1),
                "seconds": round(span.get("end", samples[-1][0]) - span.get("start", t0), 1),
                "peak_tree_mib": top[2],
                "rss_at_start": inside[0][1],
                "rss_at_end": inside[-1][1],
            }
    pss = SAMPLE_FIELDS.index("tree_pss") + 1
    return {
        "sampled_peak": _described(peak, t0),
        "open_at_peak": open_at_peak,
        "steps": per_step,
        "peak_tree_pss_mib": max((s[pss] for s in samples if len(s) > pss), default=None),
        "samples": len(samples),
    }


def _described(sample: list[float], t0: float) -> dict[str, float]:
    return dict(zip(("t_s", *SAMPLE_FIELDS), [round(sample[0] - t0, 1), *sample[1:]], strict=False))


def _open_at(marks: list[list[Any]], t: float) -> list[str]:
    """Names of the steps and marked calls entered before `t` and not yet left (innermost last)."""
    stack: list[str] = []
    for when, name, _ in marks:
        if when > t:
            break
        base, edge = name[:-2], name[-1]
        if edge == ">":
            stack.append(base)
        elif base in stack:
            stack.remove(base)
    return stack


def text_plot(timeline: dict[str, Any], width: int = 40, every_s: float = 2.0) -> str:
    """One line per `every_s` seconds, the slice's peak sample: the tree's RSS (MiB), of it file-backed, Arrow's
    pool, glibc's heap in use + free, DuckDB's allocator allocated/resident; a bar; the marks within it."""
    samples, marks = timeline["samples"], timeline["marks"]
    t0, top = samples[0][0], max(s[2] for s in samples)
    lines, i, m = [], 0, 0
    t = t0
    while i < len(samples):
        chunk = []
        while i < len(samples) and samples[i][0] < t + every_s:
            chunk.append(samples[i])
            i += 1
        names = []
        while m < len(marks) and marks[m][0] < t + every_s:
            names.append(marks[m][1])
            m += 1
        if chunk:
            high = max(chunk, key=lambda s: s[2])
            bar = "#" * round(width * high[2] / top)
            fields = dict(zip(SAMPLE_FIELDS, high[1:], strict=False))
            lines.append(
                f"{t - t0:6.1f} {fields['tree']:5.0f} file{fields['file']:4.0f} arrow{fields['arrow']:4.0f} "
                f"glibc{fields['glibc_used']:4.0f}+{fields['glibc_free']:3.0f} duckdb{fields['duckdb_allocated']:4.0f}/"
                f"{fields['duckdb_resident']:4.0f} {bar:<{width}} {'; '.join(names)[:150]}"
            )
        t += every_s
    return "\n".join(lines)


# ---------------------------------------------------------------- the parent


def run_kinds(scale: str, kinds: list[str], work_dir: Path, select: str) -> dict[str, Any]:
    import httpx

    from bench.common import free_port, installed_bytecode, start_simulator
    from bench.sync_bench import RESULTS, run_sync_child

    port = free_port()
    server = start_simulator(scale, port)
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "LESSONSYNC_BASE_URL": base_url,
        "LESSONSYNC_DATA_DIR": str(work_dir / "data"),
        "DAGSTER_HOME": str(work_dir / "dagster_home"),
    }
    env = installed_bytecode(env)
    Path(env["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    reports = {}
    try:
        for kind in kinds:
            if kind == "one_percent":
                httpx.post(f"{base_url}/_sim/advance", params={"hours": 24}, timeout=600)
            out = RESULTS / f"rss_{scale}_{kind}.json"
            out.unlink(missing_ok=True)
            urls = str(work_dir / f"{kind}.urls")
            run = run_sync_child([select], {**env, TIMELINE_ENV: str(out)}, urls, full_refresh=kind == "full_refresh")
            if not out.exists():  # the child failed before writing its timeline
                print(f"== {scale} {kind} FAILED: {run.get('error')}", file=sys.stderr)
                break
            timeline = json.loads(out.read_text())
            summary = summarize(timeline)
            reports[kind] = {
                "kernel_peak_mib": run["peak_rss_mib"],
                "cpu_seconds": run["cpu_seconds"],
                "run_cpu_seconds": run.get("run_cpu_seconds"),
                "error": run.get("error"),
                **summary,
            }
            print(
                f"== {scale} {kind}: kernel peak {run['peak_rss_mib']} MiB, process tree (sampled) RSS "
                f"{summary['sampled_peak']['tree']} / PSS {summary['peak_tree_pss_mib']} MiB, "
                f"CPU {run['cpu_seconds']} s (run_sync {run.get('run_cpu_seconds')} s)",
                file=sys.stderr,
            )
            print(text_plot(timeline), file=sys.stderr)
            print(json.dumps(reports[kind], indent=1), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    return reports


def main() -> int:
    from bench.common import created_directory

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", default="medium", choices=["tiny", "small", "medium", "large"])
    parser.add_argument(
        "--kinds",
        default="full,no_change,one_percent",
        help="also full_refresh: the full refresh job over what is there",
    )
    parser.add_argument("--select", default="key:lms/*")
    parser.add_argument(
        "--work-dir", type=created_directory, required=True, help="data dir, Dagster home (must not hold a warehouse)"
    )
    args = parser.parse_args()
    reports = run_kinds(args.scale, args.kinds.split(","), args.work_dir, args.select)
    print(
        json.dumps(
            {
                kind: {k: r[k] for k in ("kernel_peak_mib", "cpu_seconds", "sampled_peak", "open_at_peak")}
                for kind, r in reports.items()
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
