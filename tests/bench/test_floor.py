"""The floor of a sync run (bench/common.py, used by bench/sync_bench.py): the GETs a run makes are recorded
as it makes them, and the bare download of exactly those URLs fetches the same pages again. Never timed."""

from __future__ import annotations

from pathlib import Path

from bench.common import endpoint_of, recorded_gets, requests_by_endpoint, run_bare_download, write_doc_section
from pipeline.settings import Settings
from pipeline.source.client import PlatformClient
from simulator import SimulatorConfig, start_simulator


def test_a_runs_gets_are_recorded_and_downloaded_again_by_the_bare_loop(tmp_path: Path) -> None:
    with start_simulator(SimulatorConfig(seed=42, scale="tiny")) as sim:
        settings = Settings(base_url=sim.base_url, page_size=50, concurrency=2, data_dir=str(tmp_path))
        with recorded_gets() as urls, PlatformClient(settings) as client:
            rows = sum(batch.records.num_rows for batch in client.iter_stream("groups"))
        assert rows > 0
        # every group's users: one request at least each; the groups listing itself; no host, no token
        by_endpoint = requests_by_endpoint(urls)
        assert by_endpoint["/v1/groups/{group_id}/users"] >= by_endpoint["/v1/groups"] >= 1
        assert all(url.startswith("/v1/") for url in urls)
        file = tmp_path / "run.urls"
        file.write_text("\n".join(urls))
        floor = run_bare_download(sim.base_url, str(file), concurrency=2)
    assert "error" not in floor, floor
    assert floor["requests"] == len(urls) and floor["bytes"] > 0
    assert floor["cpu_seconds"] >= 0 and floor["peak_rss_mib"] > 0


def test_requests_are_counted_by_the_stream_path_they_were_made_from() -> None:
    urls = [
        "/v1/users/u%2F7/lessons/L3/answers?pageSize=100&pageNumber=1",
        "/v1/lessons/L3/answers?pageNumber=2",
        "/v1/lessons/L4/answers?pageNumber=1",
        "/v1/active-lessons?pageSize=1&pageNumber=1",
        "/v1/unknown/x",
    ]
    assert endpoint_of(urls[0]) == "/v1/users/{user_id}/lessons/{lesson_id}/answers"
    assert requests_by_endpoint(urls) == {
        "/v1/lessons/{lesson_id}/answers": 2,
        "/v1/active-lessons": 1,
        "/v1/users/{user_id}/lessons/{lesson_id}/answers": 1,
        "/v1/unknown/x": 1,
    }


def test_a_generated_doc_section_replaces_only_itself(tmp_path: Path) -> None:
    doc = tmp_path / "BENCHMARKS.md"
    start, end = "<!-- sync-small:start -->", "<!-- sync-small:end -->"
    write_doc_section(doc, start, end, f"{start}\nfirst\n{end}")
    doc.write_text("before\n" + doc.read_text() + "after\n")
    write_doc_section(doc, start, end, f"{start}\nsecond\n{end}")
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n")
    assert "second" in text and "first" not in text and text.count(start) == 1
