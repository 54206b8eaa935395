"""dlt 1.x's REST API source (`dlt.sources.rest_api`) on the platform, as a user would configure it, in two
configurations: `default` (dlt's defaults, plus only what the API needs to be reached at all) and `tuned`
(the best settings found for this workload). Used by bench/compare_bench.py, which runs it in a child
process (`python -m bench.dlt_side ...`) so its peak RSS is its own.

Plan for answers: dlt's rest_api has no way to plan requests from the active lessons that changed, so
answers are a dependent resource of the lesson catalogue: `GET /v1/lessons` (not loaded, `selected: False`)
feeds `GET /v1/lessons/{id}/answers?includeArchived=true&includeEntryQuiz=true&updatedSince=...`, one
listing per lesson (600 lessons at scale medium, 2,000 at large), which covers every answer with the fewest
listings dlt can express. The per-active-lesson alternative (`/users/{u}/lessons/{l}/answers` from the
active-lessons resource) needs one request per active lesson (1M at scale large).

Two things every configuration needs, found on the first run at scale tiny:
- dlt does not percent-encode values resolved into a path: lesson `lesson/α β?#/` becomes a wrong URL and a
  404 that fails the whole extract. A `map` processing step on the parent encodes the id first.
- `updatedSince` as a `{"type": "incremental"}` *param* of a dependent resource is filled with the
  incremental's running `last_value` each time the parent yields (dlt's `_set_incremental_params`), so later
  lessons are asked only for answers newer than those already seen: rows are lost (dlt-hub/dlt#2429, open).
  The endpoint-level `incremental` with the `{incremental.start_value}` placeholder is used instead; it still
  loses rows when the answers resource is NOT parallelized (dlt's default): probed at scale tiny with
  pageSize 10, sequential 1,502 of 2,330 answers, parallelized 2,136 (the 194 missing there are one lesson
  whose first answer page is empty).

Paging: the API returns bare JSON arrays, so the page-number paginator has no total and stops at the first
empty page (`stop_after_empty_page`, its only stopping rule here). Answer listings page on active-lesson
records and can be empty in the middle of the stream (the spec allows it): dlt then stops early on that
lesson and misses the rest of its answers. This is reported by the exactness check, never worked around.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

BEGINNING = "1970-01-01T00:00:00+00:00"

# Tuned: environment settings of dlt's config providers (documented in dlt's performance guide).
TUNED_ENV = {
    "EXTRACT__WORKERS": "8",  # thread pool for the parallelized answers resource: the concurrency LessonSync uses
    "EXTRACT__MAX_PARALLEL_ITEMS": "20",
    "NORMALIZE__WORKERS": "2",  # one process per core
    "DATA_WRITER__BUFFER_MAX_ITEMS": "50000",
    "EXTRACT__DATA_WRITER__FILE_MAX_ITEMS": "200000",  # several extract files, so the normalize workers share them
    "NORMALIZE__DATA_WRITER__FILE_MAX_ITEMS": "500000",
}
TUNED_PAGE_SIZE = 1000  # the API's maximum (the simulator's; LessonSync's benchmark setting too)
TUNED_FILE_FORMAT = "parquet"

CONFIGS = {
    "default": {"env": {}, "page_size": None, "parallelized": False, "file_format": None},
    "tuned": {"env": TUNED_ENV, "page_size": TUNED_PAGE_SIZE, "parallelized": True, "file_format": TUNED_FILE_FORMAT},
}


def describe(config: str) -> dict[str, Any]:
    """What a configuration sets, for the report (no secret in it)."""
    chosen = CONFIGS[config]
    return {
        "page_size": chosen["page_size"] or "server default (100)",
        "answers_parallelized": chosen["parallelized"],
        "loader_file_format": chosen["file_format"] or "destination default (insert_values)",
        "env": chosen["env"] or "dlt defaults (extract workers 5, normalize workers 1, buffer 5000 items)",
    }


def rest_api_config(base_url: str, token: str, config: str) -> dict[str, Any]:
    chosen = CONFIGS[config]
    sized = {"pageSize": chosen["page_size"]} if chosen["page_size"] else {}
    incremental = {"cursor_path": "lastDate", "initial_value": BEGINNING}
    return {
        "client": {
            "base_url": f"{base_url}/v1/",
            "auth": {"type": "bearer", "token": token},
            "paginator": {"type": "page_number", "base_page": 1, "page_param": "pageNumber", "total_path": None},
        },
        "resource_defaults": {"write_disposition": "merge"},
        "resources": [
            {
                "name": "active_lessons",
                "primary_key": ["_ownerId", "_userId", "_lessonId"],
                "endpoint": {
                    "path": "active-lessons",
                    "params": {**sized, "updatedSince": {"type": "incremental", **incremental}},
                },
            },
            {
                "name": "lessons",
                "selected": False,
                "endpoint": {"path": "lessons", "params": dict(sized)},
                "processing_steps": [{"map": lambda lesson: {"id": quote(str(lesson["id"]), safe="")}}],
            },
            {
                "name": "answers",
                "primary_key": ["_activeLessonId", "quizType", "attemptIndex", "_questionId"],
                "parallelized": chosen["parallelized"],
                "endpoint": {
                    "path": "lessons/{lesson_id}/answers",
                    "params": {
                        "lesson_id": {"type": "resolve", "resource": "lessons", "field": "id"},
                        **sized,
                        "includeArchived": "true",
                        "includeEntryQuiz": "true",
                        "updatedSince": "{incremental.start_value}",
                    },
                    "incremental": incremental,
                },
            },
        ],
    }


def _count_requests() -> Counter[str]:
    """Counts the GET requests dlt sends, by listing (dlt's HTTP client is a requests.Session)."""
    import requests

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    original = requests.Session.send

    def send(self: Any, request: Any, **kwargs: Any) -> Any:
        if request.method == "GET":
            kind = (
                "answers"
                if "/answers" in request.url
                else ("active_lessons" if "/active-lessons" in request.url else "lessons")
            )
            with lock:
                counts[kind] += 1
        return original(self, request, **kwargs)

    requests.Session.send = send  # type: ignore[method-assign]
    return counts


def run(base_url: str, config: str, work_dir: Path) -> dict[str, Any]:
    """One dlt sync of active lessons, then answers (two pipeline runs, as LessonSync runs its two assets in
    order), into work_dir/dlt.duckdb with dlt's state in work_dir/pipelines (so a second call is incremental)."""
    os.environ.update(CONFIGS[config]["env"])
    os.environ.setdefault("RUNTIME__LOG_LEVEL", "WARNING")
    import dlt
    import httpx
    from dlt.sources.rest_api import rest_api_source

    from simulator.config import DEFAULT_APP_SECRET

    counts = _count_requests()
    token = httpx.post(f"{base_url}/v1/token", json={"appSecret": DEFAULT_APP_SECRET}, timeout=30).json()[
        "access_token"
    ]
    pipeline = dlt.pipeline(
        "lessonsync_bench",
        destination=dlt.destinations.duckdb(str(work_dir / "dlt.duckdb")),
        dataset_name="lms",
        pipelines_dir=str(work_dir / "pipelines"),
    )
    file_format = CONFIGS[config]["file_format"]
    report: dict[str, Any] = {"streams": {}}
    began = time.perf_counter()
    for stream in ("active_lessons", "answers"):
        source = rest_api_source(rest_api_config(base_url, token, config)).with_resources(stream)
        before = sum(counts.values())
        started = time.perf_counter()
        pipeline.run(source, **({"loader_file_format": file_format} if file_format else {}))
        seconds = time.perf_counter() - started
        trace = pipeline.last_trace
        rows = trace.last_normalize_info.row_counts if trace.last_normalize_info else {}
        steps = {
            step.step: round((step.finished_at - step.started_at).total_seconds(), 2)
            for step in trace.steps
            if step.finished_at and step.started_at
        }
        report["streams"][stream] = {
            "seconds": round(seconds, 2),
            "requests": sum(counts.values()) - before,
            "rows": {t: n for t, n in rows.items() if not t.startswith("_dlt")},
            "step_seconds": steps,
        }
    report["run_seconds"] = round(time.perf_counter() - began, 2)
    report["requests"] = dict(counts)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--config", choices=tuple(CONFIGS), required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args()
    print(json.dumps(run(args.base_url, args.config, args.work_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
