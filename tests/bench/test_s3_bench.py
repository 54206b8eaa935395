"""bench/s3_bench.py reads the store's requests from the access log of moto's server: one line a request, a GET
of a listing counted as LIST, not as a read. Never timed."""

from __future__ import annotations

from pathlib import Path

from bench.s3_bench import requests_in


def test_the_access_log_is_counted_by_kind_and_a_listing_is_not_a_read(tmp_path: Path) -> None:
    log = tmp_path / "moto.log"
    log.write_text(
        '127.0.0.1 - - [05/Dec/2026 20:48:03] "GET /lake/part.parquet HTTP/1.1" 206 -\n'
        '127.0.0.1 - - [05/Dec/2026 20:48:03] "GET /lake?list-type=2&prefix=_loads%2F HTTP/1.1" 200 -\n'
        '127.0.0.1 - - [05/Dec/2026 20:48:03] "PUT /lake/_loads/000001.json HTTP/1.1" 412 -\n'
        '127.0.0.1 - - [05/Dec/2026 20:48:03] "HEAD /lake/part.parquet HTTP/1.1" 404 -\n'
        " * Running on http://127.0.0.1:5000\n"
    )
    assert requests_in(log) == {"GET": 1, "LIST": 1, "PUT": 1, "HEAD": 1}
